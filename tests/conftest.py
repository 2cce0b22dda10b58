"""Fixtures of the test suite: run a command the way a reader would."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


class Cli:
    """Runs ``python -X faulthandler ...`` from the repository root and checks its output.

    ``-m MODULE`` and ``-c CODE`` run in a child forked from a server that has imported torch
    already (``tests/forkserver.py``: the same process set-up, without paying for the import
    again); anything else, or an environment that would change what is imported, in a fresh
    interpreter.
    """

    repo = REPO
    _forkserver = None

    @staticmethod
    def cpu_env(**extra: str) -> dict[str, str]:
        """The environment of a CPU run, on any machine: no GPU is visible."""
        env = dict(os.environ)
        env.pop("PYTHONWARNINGS", None)
        env.update(CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1", **extra)
        return env

    @classmethod
    def _server(cls):
        """This process's fork server, started on first use (None: off, or it could not start)."""
        from tests.forkserver import OFF, ForkServer

        if os.environ.get(OFF) == "0":
            return None
        if cls._forkserver is None:
            import atexit
            import tempfile

            scratch = tempfile.mkdtemp(prefix="lab-forkserver-")
            cls._forkserver = ForkServer(cls.cpu_env(), str(REPO), scratch)
            atexit.register(cls._forkserver.close)
            atexit.register(__import__("shutil").rmtree, scratch, True)
        return cls._forkserver if cls._forkserver.alive else None

    @classmethod
    def run(cls, *args: str, timeout: float = 180, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """A hang fails the test (with what the process had printed) instead of stalling CI."""
        argv = [sys.executable, "-X", "faulthandler", *map(str, args)]
        env = env or cls.cpu_env()
        server = cls._server()
        forked = server.run(argv[3:], env, timeout) if server else None
        if forked is not None:
            returncode, out, err, timed_out = forked
            if timed_out:
                raise AssertionError(f"python {' '.join(map(str, args))} ran past {timeout} s\n"
                                     f"--- stdout\n{out}\n--- stderr\n{err}")
            return subprocess.CompletedProcess(argv, returncode, out, err)
        try:
            return subprocess.run(
                argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
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


#: Set by ``make test`` to the folder its strict build of this tree writes: the tests read that
#: build instead of building the book a second time.
BUILT_SITE_ENV = "LAB_BUILT_SITE"
#: Set by ``make test``, whose build runs beside the tests: a file that appears when the build
#: is done, holding ``exit STATUS`` (a test waits for it only where it reads the site).
BUILT_SITE_STATUS_ENV = "LAB_BUILT_SITE_STATUS"
BUILD_WAIT_S = 900


@pytest.fixture(scope="session")
def built_site(tmp_path_factory) -> Path:
    """The book, built once per session with ``--strict``, for every test that reads it.

    Under ``make test`` it is the site that its strict build writes (``$LAB_BUILT_SITE``), once
    that build is done (``$LAB_BUILT_SITE_STATUS``); run alone, pytest builds it here, once for
    all its xdist workers: the first to need it builds it under a lock, the others wait for it
    and read the same folder.
    """
    given = os.environ.get(BUILT_SITE_ENV)
    if given:
        site = Path(given)
        status_file = os.environ.get(BUILT_SITE_STATUS_ENV)
        if status_file:
            import time

            deadline = time.monotonic() + BUILD_WAIT_S
            while not os.path.exists(status_file):
                if time.monotonic() > deadline:
                    pytest.fail(f"the site build did not finish within {BUILD_WAIT_S} s", pytrace=False)
                time.sleep(0.5)
            status = Path(status_file).read_text(encoding="utf-8").strip()
            if status != "exit 0":
                pytest.fail(f"mkdocs build --strict -d {given} failed ({status}): its output follows the tests'",
                            pytrace=False)
        assert (site / "index.html").is_file(), f"${BUILT_SITE_ENV}={given} holds no built site"
        return site
    import fcntl

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the session's folder, above each worker's own
    out, done = shared / "built-site", shared / "built-site.ok"
    with open(shared / "built-site.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            proc = subprocess.run(
                [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                cwd=REPO, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
                env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
            )
            done.write_text(f"exit {proc.returncode}\n{proc.stdout}{proc.stderr}", encoding="utf-8")
    status, _, output = done.read_text(encoding="utf-8").partition("\n")
    assert status == "exit 0", f"mkdocs build --strict failed ({status})\n{output}"
    return out


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup``: the scheduler of ``tests/xdist_schedule.py`` (a module's tests on one
    worker, so its costly fixtures are made once; the longest work first)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from tests.xdist_schedule import ModuleScheduling

    return ModuleScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """``@pytest.mark.needs_cuda``: skipped, with that reason, where torch sees no GPU."""
    marked = [item for item in items if item.get_closest_marker("needs_cuda")]
    if not marked:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU (torch {torch.__version__} sees none)")
    for item in marked:
        item.add_marker(skip)
