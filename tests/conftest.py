"""Fixtures of the test suite: run a command the way a reader would."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


class Cli:
    """Runs ``python -X faulthandler ...`` from the repository root and checks its output."""

    repo = REPO

    @staticmethod
    def cpu_env(**extra: str) -> dict[str, str]:
        """The environment of a CPU run, on any machine: no GPU is visible."""
        env = dict(os.environ)
        env.pop("PYTHONWARNINGS", None)
        env.update(CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1", **extra)
        return env

    @classmethod
    def run(cls, *args: str, timeout: float = 180, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """A hang fails the test (with what the process had printed) instead of stalling CI."""
        try:
            return subprocess.run(
                [sys.executable, "-X", "faulthandler", *map(str, args)],
                cwd=REPO, env=env or cls.cpu_env(), capture_output=True, text=True,
                timeout=timeout, stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
            err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
            raise AssertionError(f"python {' '.join(map(str, args))} ran past {timeout} s\n"
                                 f"--- stdout\n{out}\n--- stderr\n{err}") from None

    @staticmethod
    def explain(proc: subprocess.CompletedProcess) -> str:
        """What a failing assertion shows: the command, its status and its output."""
        return (f"$ {' '.join(map(str, proc.args))}\nexit {proc.returncode}\n"
                f"--- stdout\n{proc.stdout}--- stderr\n{proc.stderr}")

    @classmethod
    def quick_record(cls, topic: str, folder: Path, timeout: float = 180):
        """``python -m examples.TOPIC --quick --device cpu --json``, as CI runs every example:
        it must succeed and write a record of this topic, of a quick CPU run, naming its file.
        Returns the process and the parsed record."""
        from examples.lab.records import parse_record

        out = Path(folder) / "record.json"
        proc = cls.run("-m", f"examples.{topic}", "--quick", "--device", "cpu", "--json", out, timeout=timeout)
        assert proc.returncode == 0, cls.explain(proc)
        assert out.is_file(), f"--json {out} wrote nothing\n{cls.explain(proc)}"
        record = parse_record(out.read_text(encoding="utf-8"), str(out))
        assert record.topic == topic
        assert record.machine.device == "cpu"
        assert record.run.quick is True
        assert record.source == f"examples/{topic.replace('.', '/')}.py"
        return proc, record

    @classmethod
    def one_line_error(cls, proc: subprocess.CompletedProcess, status: int = 2) -> str:
        """Assert a usage error's shape: ``status``, one line on stderr, no traceback; return the line."""
        assert proc.returncode == status, cls.explain(proc)
        assert "Traceback" not in proc.stderr + proc.stdout, cls.explain(proc)
        lines = proc.stderr.splitlines()
        assert len(lines) == 1, f"expected exactly one line on stderr\n{cls.explain(proc)}"
        return lines[0]


@pytest.fixture(scope="session")
def cli() -> type[Cli]:
    return Cli


#: Set by ``make test`` to the folder its ``build`` step has just built, strictly, from
#: this tree: the tests read that build instead of building the book a second time.
BUILT_SITE_ENV = "LAB_BUILT_SITE"


@pytest.fixture(scope="session")
def built_site(tmp_path_factory) -> Path:
    """The book, built once per session with ``--strict``, for every test that reads it.

    Under ``make test`` it is the site that ``make build`` has just built (``$LAB_BUILT_SITE``);
    run alone, pytest builds it here.
    """
    given = os.environ.get(BUILT_SITE_ENV)
    if given:
        site = Path(given)
        assert (site / "index.html").is_file(), f"${BUILT_SITE_ENV}={given} holds no built site"
        return site
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed (exit {proc.returncode})\n{proc.stdout}{proc.stderr}"
    return out


#: Fixtures too costly to make twice (a build, a real run of an example, a browser): under
#: ``pytest -n 2 --dist loadgroup`` every test that uses one goes to the same worker, so each
#: is made once per session, not once per worker (``make test`` runs tests/ so; the pages'
#: and docstrings' examples, which share a namespace per page, run after, in one process).
SHARED_FIXTURES = ("built_site", "reader_site", "one_gpu_reader", "reader", "runner_records", "quick_run",
                   "browser", "tiny")


def pytest_collection_modifyitems(config, items):
    """Group the users of a costly fixture (see SHARED_FIXTURES) on one xdist worker, and
    ``@pytest.mark.needs_cuda``: skipped, with that reason, where torch sees no GPU."""
    reused_site = bool(os.environ.get(BUILT_SITE_ENV))
    for item in items:
        for name in SHARED_FIXTURES:
            if name in getattr(item, "fixturenames", ()) and not (name == "built_site" and reused_site):
                # built_site is made once per session; the others once per module.
                group = name if name == "built_site" else f"{name}@{item.path.name}"
                item.add_marker(pytest.mark.xdist_group(group))
                break
    marked = [item for item in items if item.get_closest_marker("needs_cuda")]
    if not marked:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU (torch {torch.__version__} sees none)")
    for item in marked:
        item.add_marker(skip)
