"""MkDocs hook: one Jupyter notebook per chapter, generated from its examples.

Nothing is kept by hand: at every build, each package ``examples/<chapter>/``
becomes ``notebooks/<chapter>.ipynb`` (a title cell, then per example a
markdown cell with its docstring and a code cell that imports the module and
runs its ``main()`` the way CI does: measured examples in quick mode on the
CPU, calculators with their ``EXAMPLE_ARGV``). The notebooks are written to a
temporary folder, never into ``docs/``, and added to the site as generated
files; mkdocs-jupyter renders them as pages and copies each ``.ipynb`` beside
its page (``include_source``). The chapter page that includes a package's
examples gets one line that links its notebook.

``tests/test_notebooks.py`` executes every notebook on the CPU.
"""
from __future__ import annotations

import ast
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files
from mkdocs.utils import get_relative_url

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab_site.chapters import package_pages  # noqa: E402  (the hooks' package; mkdocs loads hooks by path)

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
NOT_CHAPTERS = {"lab"}
SITE_DIR = "notebooks"
#: Where the site keeps the examples' sources (``overrides/hooks/reading.py`` copies them there),
#: seen from a notebook's page (``notebooks/<chapter>/``).
SOURCES_FROM_NOTEBOOK = "../../"
#: An inline script of nbconvert's template that imports from a CDN (its Mermaid loader).
CDN_SCRIPT = re.compile(r"<script\b[^>]*>(?:(?!</script>).)*?https://cdnjs\.cloudflare\.com"
                        r"(?:(?!</script>).)*?</script>", re.S)

RUN = '''\
def run(module, argv):
    """Run one example's command line in this kernel; fail if it fails."""
    code = module.main(list(argv))
    if code:
        raise RuntimeError(f"{module.__name__} {' '.join(argv)} exited with {code}")'''

SETUP = '''\
# The examples are the package `examples` of the book's repository: open this
# notebook inside a clone of it, after the README's set-up (`make setup`).
import os
import sys
from pathlib import Path

ROOT = next((p for p in (Path.cwd(), *Path.cwd().parents)
             if (p / "examples" / "lab").is_dir()), None)
if ROOT is None:
    raise RuntimeError("open this notebook inside a clone of the book's repository")
sys.path.insert(0, str(ROOT))
os.chdir(ROOT)

import torch

if not torch.cuda.is_available():
    # Triton's kernels run in its interpreter on a CPU; Triton reads this setting
    # once, when it is first imported, so it is set before any example runs.
    os.environ.setdefault("TRITON_INTERPRET", "1")

DEVICE = "auto"      # the GPU when torch sees one, else the CPU
QUICK = ["--quick"]  # [] for the book's full sizes (on a GPU)


''' + RUN


@dataclass(frozen=True)
class Example:
    name: str
    doc: str
    kind: str  # "measured" or "calculator"


@dataclass(frozen=True)
class Chapter:
    package: str
    title: str  # "Chapter 5: CUDA Graphs and launch overhead."
    number: int
    examples: tuple[Example, ...]


def _kind(tree: ast.Module) -> str | None:
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    if "measure" in names:
        return "measured"
    if "EXAMPLE_ARGV" in names:
        return "calculator"
    return None


def chapters(root: Path = EXAMPLES) -> list[Chapter]:
    """Every chapter package under ``root``, in chapter order, read without importing it."""
    out = []
    for package in sorted(p for p in root.iterdir() if (p / "__init__.py").is_file()):
        if package.name in NOT_CHAPTERS:
            continue
        title = ast.get_docstring(ast.parse((package / "__init__.py").read_text("utf-8"))) or ""
        number = re.match(r"Chapter (\d+)", title)
        if not number:
            raise ValueError(f"{package}/__init__.py: the docstring must start 'Chapter N: ...'")
        examples = []
        for path in sorted(package.glob("*.py")):
            if path.name.startswith("_"):
                continue
            tree = ast.parse(path.read_text("utf-8"))
            kind = _kind(tree)
            if kind is None:
                raise ValueError(f"{path}: defines neither measure(lab) nor EXAMPLE_ARGV")
            examples.append(Example(path.stem, ast.get_docstring(tree) or "", kind))
        out.append(Chapter(package.name, title, int(number.group(1)), tuple(examples)))
    return sorted(out, key=lambda c: c.number)


def _markdown(doc: str) -> str:
    """A module docstring as notebook Markdown: ``code`` as `code`, doctests fenced."""
    lines, out, in_doctest = doc.replace("``", "`").splitlines(), [], False
    for line in lines:
        if line.startswith(">>>") and not in_doctest:
            out.append("```pycon")
            in_doctest = True
        elif in_doctest and not line.strip():
            out.append("```")
            in_doctest = False
        out.append(line)
    if in_doctest:
        out.append("```")
    return "\n".join(out)


def source_link(package: str, name: str) -> str:
    """The Markdown that names an example's file and links it to its copy in the site."""
    path = f"examples/{package}/{name}.py"
    return f"Source: [`{path}`]({SOURCES_FROM_NOTEBOOK}{path}) (the same path in a clone of the repository)."


def notebook(chapter: Chapter) -> nbformat.NotebookNode:
    """The notebook of one chapter: runs top to bottom on a machine without a GPU."""
    v4 = nbformat.v4
    title = chapter.title.rstrip(".")
    cells = [
        v4.new_markdown_cell(
            f"# {title}: the examples\n\n"
            f"Generated from `examples/{chapter.package}/` when the book's site is built. "
            "Each code cell runs one example as its command line would: measured examples "
            "in quick mode (on the CPU when no GPU is visible), calculators with their "
            "example inputs. On a GPU machine, set `QUICK = []` for the sizes the book "
            "measured with."
        ),
        v4.new_code_cell(SETUP),
    ]
    for ex in chapter.examples:
        module = f"examples.{chapter.package}.{ex.name}"
        cells.append(v4.new_markdown_cell(
            f"## `{module}`\n\n{source_link(chapter.package, ex.name)}\n\n{_markdown(ex.doc)}"))
        argv = (f"{ex.name}.EXAMPLE_ARGV" if ex.kind == "calculator"
                else '[*QUICK, "--device", DEVICE]')
        cells.append(v4.new_code_cell(
            f"from examples.{chapter.package} import {ex.name}\n\nrun({ex.name}, {argv})"))
    nb = v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for n, cell in enumerate(nb.cells):  # stable ids: the same examples give the same file
        cell["id"] = f"{chapter.package}-{n}"
    return nb


def write_all(out: Path, root: Path = EXAMPLES) -> dict[str, Path]:
    """Write every chapter's notebook into ``out``; ``{package: path}``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for chapter in chapters(root):
        path = out / f"{chapter.package}.ipynb"
        nbformat.write(notebook(chapter), path)
        paths[chapter.package] = path
    return paths


# -- the hook ---------------------------------------------------------------------
_state: dict = {}


@event_priority(50)  # before mkdocs-jupyter's on_files, which turns .ipynb files into pages
def on_files(files: Files, config) -> Files:
    folder = Path(tempfile.mkdtemp(prefix="lab-notebooks-"))
    _state["folder"] = folder
    notebooks = write_all(folder / SITE_DIR)  # .../notebooks/x.ipynb: mkdocs-jupyter's include
    for package, path in notebooks.items():
        # A plain File whose src_dir is the temporary folder: mkdocs-jupyter wraps it and
        # reads it through src_dir (File.generated's abs_src_path does not survive the wrap).
        files.append(File(f"{SITE_DIR}/{package}.ipynb", src_dir=str(folder),
                          dest_dir=config.site_dir, use_directory_urls=config.use_directory_urls))
    # The chapter page of a package: the page that includes most of its examples.
    # (lab_site.chapters: the same mapping puts a topic's records on its chapter's page of Appendix A.)
    found = package_pages((file.src_uri, Path(file.abs_src_path).read_text("utf-8"))
                          for file in files.documentation_pages()
                          if file.src_uri.endswith(".md") and file.abs_src_path)
    _state["pages"] = {page: package for package, page in found.items() if package in notebooks}
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    package = _state.get("pages", {}).get(page.file.src_uri)
    if package is None:
        return markdown
    notebook_page = f"{SITE_DIR}/{package}.ipynb"
    raw = get_relative_url(f"{SITE_DIR}/{package}/{package}.ipynb", page.file.url)
    link = get_relative_url(notebook_page, page.file.src_uri)
    return (f"{markdown}\n\n"
            f'!!! example "This chapter as a notebook"\n'
            f'    <a href="{raw}" download>Download `{package}.ipynb`</a>: every example of the '
            f"chapter, runnable top to bottom on a CPU ([read it here]({link})).\n")


def on_post_page(output: str, page, config) -> str:
    # nbconvert's template loads MathJax and Mermaid from a CDN; the notebooks have no
    # formulas or diagrams and the site reads offline, so both loaders are dropped.
    if page.file.src_uri.startswith(f"{SITE_DIR}/") and page.file.src_uri.endswith(".ipynb"):
        output = re.sub(r'<!-- Load mathjax -->\s*<script src="[^"]*">\s*</script>', "", output)
        output = CDN_SCRIPT.sub("", output)
    return output


def on_post_build(config) -> None:
    folder = _state.pop("folder", None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
