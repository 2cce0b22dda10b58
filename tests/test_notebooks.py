"""The chapters' notebooks: generated from the examples, executed on the CPU, on the site.

``overrides/hooks/notebooks.py`` writes one notebook per chapter package at build
time. Here every notebook is generated afresh and run top to bottom in a Jupyter
kernel (nbclient) with no GPU visible, as a reader without a GPU would run it (the
measured examples' runs left to test_runs_on_cpu, which runs the same command lines:
``ONLY_PARSE_MEASURED``); and
the built site has a page and a download per notebook, linked from its chapter,
with nothing loaded from another host.
"""
from __future__ import annotations

import ast
import importlib
import re
import shutil
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "overrides" / "hooks"))

import notebooks  # noqa: E402

CHAPTERS = notebooks.chapters()
CELL_TIMEOUT_S = 300
#: Kernels at a time: much of a run is waiting (kernel start-up, Chapter 6's gloo processes).
WORKERS = 4


def test_every_chapter_and_example_is_in_a_notebook():
    packages = sorted(p.parent.name for p in (REPO / "examples").glob("*/__init__.py")
                      if p.parent.name not in notebooks.NOT_CHAPTERS)
    assert sorted(c.package for c in CHAPTERS) == packages
    assert [c.number for c in CHAPTERS] == sorted(c.number for c in CHAPTERS)
    for chapter in CHAPTERS:
        nb = notebooks.notebook(chapter)
        nbformat.validate(nb)
        assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith(
            f"# Chapter {chapter.number}:")
        code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        expected = sorted(p.stem for p in (REPO / "examples" / chapter.package).glob("*.py")
                          if not p.name.startswith("_"))
        ran = sorted(re.findall(rf"^from examples\.{chapter.package} import (\w+)$", code, re.M))
        assert ran == expected, f"{chapter.package}: the notebook runs {ran}, the package has {expected}"
        for cell in nb.cells[2:]:  # each example: its docstring, then the cell that runs it
            if cell.cell_type == "code":
                ast.parse(cell.source)


def test_generation_is_deterministic(tmp_path):
    first = notebooks.write_all(tmp_path / "a")
    second = notebooks.write_all(tmp_path / "b")
    assert {k: p.read_bytes() for k, p in first.items()} == {k: p.read_bytes() for k, p in second.items()}


def test_a_failing_example_fails_its_notebook(tmp_path):
    """The ``run`` helper raises on a non-zero exit, so a failing example cannot pass unseen."""
    ns: dict = {}
    exec(notebooks.RUN, ns)
    failing = type("M", (), {"__name__": "examples.x.failing", "main": staticmethod(lambda argv: 2)})
    with pytest.raises(RuntimeError, match="exited with 2"):
        ns["run"](failing, ["--quick"])


#: Calculators whose run takes seconds of CPU (an FP8 scaling of a 1024 x 4096 matrix, an ONNX
#: export, a 4096 x 4096 int8 product: 15 CPU-s in all, most of the Chapter 7 kernel's): like a
#: measured example, only their command line is parsed here. test_runs_on_cpu runs each for real
#: with the same arguments as its notebook cell (``EXAMPLE_ARGV``); the other calculators still
#: run for real in the kernels, through the notebook's own ``run``.
SLOW_CALCULATORS = ("examples.ecosystem.fp8_scaling", "examples.ecosystem.onnx_export",
                    "examples.capstone.int8_linear")

#: Put in after the set-up cell, in the test's copy only: measured examples are not run
#: again here. Each one's quick CPU run, with the same command line, is test_runs_on_cpu's
#: (``tests/test_examples.py``; ``--device auto`` is the CPU there); running all of them a
#: second time in the kernels cost CI two minutes. The kernel still runs the set-up and
#: imports every example; a measured example's command line must parse; a calculator
#: runs for real, through the notebook's own ``run`` (but for ``SLOW_CALCULATORS``: parsed).
ONLY_PARSE_MEASURED = f"""\
import contextlib, io
_run = run

def run(module, argv):
    if getattr(module, "EXAMPLE_ARGV", None) is not None and module.__name__ not in {SLOW_CALCULATORS!r}:
        return _run(module, argv)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        module.main([*argv, "--help"])  # parses argv up to --help, then exits
    if "usage:" not in out.getvalue():
        raise RuntimeError(f"{{module.__name__}} {{argv}}: its command line did not parse")"""


def test_the_slow_calculators_are_calculators_run_by_test_runs_on_cpu():
    """A name here that no longer is a calculator (or is left to another test) would skip nothing, or hide one."""
    from tests.test_examples import RUN_BY_THEIR_OWN_TEST, TOPICS

    for name in SLOW_CALCULATORS:
        topic = name.removeprefix("examples.")
        assert topic in TOPICS and topic not in RUN_BY_THEIR_OWN_TEST, name
        assert getattr(importlib.import_module(name), "EXAMPLE_ARGV", None) is not None, f"{name} is no calculator"


def _execute(path: Path, sockets: Path) -> tuple[str, str | None]:
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(2, nbformat.v4.new_code_cell(ONLY_PARSE_MEASURED))
    # Over TCP each kernel takes ports that were free a moment before, and two kernels starting at
    # once (the pool's, another test process's) can take the same one ("Address already in use": the
    # kernel dies before replying). IPC sockets under a name of the notebook's own cannot collide.
    kernel = AsyncKernelManager(kernel_name="python3", transport="ipc", ip=str(sockets / path.stem))
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", km=kernel,
                            resources={"metadata": {"path": str(REPO)}})
    try:
        client.execute()
    except CellExecutionError as error:
        return path.stem, str(error)[-3000:]
    return path.stem, None


def test_every_notebook_runs_top_to_bottom_on_the_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # the kernels inherit it: no GPU, anywhere
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the notebook sets it itself
    monkeypatch.delenv("PYTHONWARNINGS", raising=False)
    paths = notebooks.write_all(tmp_path)
    sockets = Path(tempfile.mkdtemp(prefix="nb-"))  # short: a socket's path has at most 107 bytes
    try:
        with ThreadPoolExecutor(WORKERS) as pool:
            results = list(pool.map(lambda path: _execute(path, sockets), sorted(paths.values())))
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
    failed = {name: error for name, error in results if error}
    assert not failed, "\n\n".join(f"{name}.ipynb failed:\n{error}" for name, error in failed.items())


@pytest.fixture(scope="module")
def site(built_site) -> Path:
    return built_site


EXTERNAL = re.compile(r'<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)="(?:https?:)?//', re.I)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.package)
def test_the_site_renders_and_links_each_notebook(chapter, site):
    page = site / "notebooks" / chapter.package / "index.html"
    html = page.read_text("utf-8")
    assert "jupyter-wrapper" in html, f"{page} was not rendered by mkdocs-jupyter"
    assert not EXTERNAL.findall(html), f"{page} loads from another host: {EXTERNAL.findall(html)}"
    assert "cdnjs" not in html and "mathjax.js" not in html.lower(), f"{page} names a CDN loader"
    download = site / "notebooks" / chapter.package / f"{chapter.package}.ipynb"
    assert nbformat.reads(download.read_text("utf-8"), as_version=4) == notebooks.notebook(chapter)
    linked = [p for p in site.glob("*/index.html")
              if p.parent.name != "print_page"  # the print edition: the chapters again (test_print_edition.py)
              and f'href="../notebooks/{chapter.package}/{chapter.package}.ipynb" download' in p.read_text("utf-8")]
    assert len(linked) == 1, f"{chapter.package}.ipynb is linked from {linked}, expected one chapter page"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.package)
def test_each_notebook_links_the_source_of_every_example_it_runs(chapter, site):
    page = site / "notebooks" / chapter.package / "index.html"
    hrefs = re.findall(r'Source: <a href="([^"]+)">', page.read_text("utf-8"))
    assert hrefs == [f"{notebooks.SOURCES_FROM_NOTEBOOK}examples/{chapter.package}/{ex.name}.py"
                     for ex in chapter.examples]
    for href in hrefs:
        assert (page.parent / href).resolve().is_file(), f"{page.relative_to(site)} links to {href}, not in the site"
