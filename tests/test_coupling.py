"""Pages and examples stay coupled: no orphan example, no dangling include, no untested code.

* every example file is included by some page;
* every ``--8<-- "examples/FILE:SECTION"`` names a file and a section that exist
  (``# --8<-- [start:SECTION]`` before ``# --8<-- [end:SECTION]``), never line numbers;
* an include sits alone in a fence labelled ``py`` whose ``title`` is the included path;
* every other fence with a Python-like language is a plain ```` ```python ```` fence,
  which Sybil runs (``conftest.py``). A ``py`` fence is never run, so it may hold
  nothing but an include.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from examples.lab.registry import example_files

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PYTHON_LIKE = {"python", "py", "python3", "py3", "pycon", "ipython", "pyi"}

FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*?)[ \t]*$")
INCLUDE = re.compile(r"""^[ \t]*-{1,3}8<-{1,3}[ \t]+(?P<quote>["'])(?P<target>[^"']+)(?P=quote)[ \t]*$""")
TITLE = re.compile(r"""\btitle=(?P<quote>["'])(?P<title>.*?)(?P=quote)""")
SECTION_MARK = re.compile(r"^[ \t]*#[ \t]*-{1,3}8<-{1,3}[ \t]*\[(?P<kind>start|end):(?P<name>[A-Za-z0-9_-]+)\][ \t]*$")


@dataclass
class Fence:
    page: Path
    line: int  # 1-based line of the opening fence
    language: str
    attributes: str
    body: list[str]

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


@dataclass
class Include:
    page: Path
    line: int
    path: str
    section: str | None
    fence: Fence | None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md")) if DOCS.is_dir() else []


def parse_page(page: Path) -> tuple[list[Fence], list[Include]]:
    """Fenced blocks (indented ones too, inside admonitions and tabs) and snippet includes."""
    lines = page.read_text(encoding="utf-8").splitlines()
    fences, includes = [], []
    i = 0
    while i < len(lines):
        opening = FENCE_OPEN.match(lines[i])
        if not opening:
            i += 1
            continue
        marker = opening["fence"]
        close = re.compile(rf"^[ \t]*{re.escape(marker[0])}{{{len(marker)},}}[ \t]*$")
        info = opening["info"].strip()
        language, _, attributes = info.partition(" ")
        language = language.lstrip(".{").rstrip("}").lower()
        body, j = [], i + 1
        while j < len(lines) and not close.match(lines[j]):
            body.append(lines[j])
            j += 1
        fence = Fence(page, i + 1, language, attributes.strip(), body)
        fences.append(fence)
        for k, text in enumerate(body):
            if (m := INCLUDE.match(text)) and m["target"].startswith("examples/"):
                includes.append(_include(page, i + 2 + k, m["target"], fence))
        i = j + 1
    # includes outside any fence (a mistake the fence checks below report)
    inside = {inc.line for inc in includes}
    for n, text in enumerate(lines, start=1):
        if n not in inside and (m := INCLUDE.match(text)) and m["target"].startswith("examples/"):
            if not any(f.line < n <= f.line + len(f.body) for f in fences):
                includes.append(_include(page, n, m["target"], None))
    return fences, includes


def _include(page: Path, line: int, target: str, fence: Fence | None) -> Include:
    path, _, section = target.partition(":")
    return Include(page, line, path, section or None, fence)


def sections(path: Path) -> dict[str, tuple[int, int]]:
    """``NAME -> (start line, end line)`` of the snippet sections of a source file."""
    starts, spans = {}, {}
    for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if m := SECTION_MARK.match(text):
            if m["kind"] == "start":
                starts[m["name"]] = n
            elif m["name"] in starts:
                spans[m["name"]] = (starts[m["name"]], n)
            else:
                spans[m["name"]] = (n + 1, n)  # an end before its start: reported as empty
    for name, n in starts.items():
        spans.setdefault(name, (n, -1))
    return spans


ALL = [(page, *parse_page(page)) for page in pages()]
FENCES = [f for _, fences, _ in ALL for f in fences]
INCLUDES = [inc for _, _, includes in ALL for inc in includes]


def test_there_is_something_to_check():
    assert ALL, "docs/ holds no page (*.md)"
    assert INCLUDES, "no page includes an example (--8<-- \"examples/...\")"


def test_every_example_is_included_by_a_page():
    included = {inc.path for inc in INCLUDES}
    orphans = [p.relative_to(REPO).as_posix() for p in example_files()
               if p.relative_to(REPO).as_posix() not in included]
    assert example_files(), "registry.example_files() found no example"
    assert not orphans, f"examples that no page includes: {', '.join(orphans)}"


@pytest.mark.parametrize("inc", INCLUDES, ids=lambda inc: inc.where)
def test_include_points_at_a_real_section(inc):
    path = REPO / inc.path
    assert path.is_file(), f"{inc.where}: includes {inc.path}, which does not exist"
    if inc.section is None:
        return
    assert not re.fullmatch(r"[\d:,-]+", inc.section), (
        f"{inc.where}: includes {inc.path} by line numbers ({inc.section}); mark a section "
        "with '# --8<-- [start:NAME]' / '# --8<-- [end:NAME]' and include it by name")
    spans = sections(path)
    assert inc.section in spans, (
        f"{inc.where}: {inc.path} has no section '{inc.section}' (it has: {', '.join(spans) or 'none'})")
    start, end = spans[inc.section]
    assert start < end, f"{inc.where}: section '{inc.section}' of {inc.path} is not closed by [end:{inc.section}]"
    assert end - start > 1, f"{inc.where}: section '{inc.section}' of {inc.path} is empty"


@pytest.mark.parametrize("inc", INCLUDES, ids=lambda inc: inc.where)
def test_include_fence_is_py_with_its_path_as_title(inc):
    fence = inc.fence
    assert fence is not None, f"{inc.where}: an include of {inc.path} outside a code fence"
    assert fence.language == "py", (
        f"{fence.where}: an include fence must be labelled 'py' (Sybil runs 'python' fences, and would "
        f"run the --8<-- line as Python), not '{fence.language}'")
    title = TITLE.search(fence.attributes)
    assert title and title["title"] == inc.path, (
        f"{fence.where}: the include fence of {inc.path} needs title=\"{inc.path}\" "
        f"(has: {fence.attributes or 'no attributes'})")


@pytest.mark.parametrize("fence", [f for f in FENCES if f.language in PYTHON_LIKE], ids=lambda f: f.where)
def test_python_fence_is_tested_or_an_include(fence):
    if fence.language == "python":
        assert not fence.attributes, (
            f"{fence.where}: a 'python' fence with attributes ({fence.attributes}) is not run by Sybil; "
            "write a plain ```python fence, or move the code into examples/ and include it")
        assert not any(INCLUDE.match(text) for text in fence.body), (
            f"{fence.where}: a 'python' fence holding a --8<-- line runs as Python; label include fences 'py'")
        assert any(text.strip() for text in fence.body), f"{fence.where}: an empty python fence"
        return
    assert fence.language == "py", (
        f"{fence.where}: '{fence.language}' fences are not tested; use a plain ```python fence (run by "
        "Sybil, '>>>' blocks included) or include the code from examples/ in a 'py' fence")
    code = [text for text in fence.body if text.strip()]
    assert len(code) == 1 and INCLUDE.match(code[0]), (
        f"{fence.where}: a 'py' fence is never run, so it may hold only one --8<-- include of examples/")


def test_the_page_parser_itself(tmp_path):
    """The checks above see what they must: indented fences, tildes, stray includes."""
    page = tmp_path / "page.md"
    page.write_text(
        "```python\n1 + 1\n```\n"
        '```py title="examples/graphs/launch_budget.py"\n--8<-- "examples/graphs/launch_budget.py:model"\n```\n'
        '!!! note\n    ````python title="x.py"\n    ```\n    print(1)\n    ````\n'
        "~~~pycon\n>>> 1\n1\n~~~\n"
        '--8<-- "examples/graphs/launch_cost.py:chain"\n',
        encoding="utf-8",
    )
    fences, includes = parse_page(page)
    assert [(f.line, f.language, f.attributes) for f in fences] == [
        (1, "python", ""), (4, "py", 'title="examples/graphs/launch_budget.py"'),
        (8, "python", 'title="x.py"'), (12, "pycon", "")]
    assert fences[2].body == ["    ```", "    print(1)"]
    assert [(i.line, i.path, i.section, i.fence is not None) for i in includes] == [
        (5, "examples/graphs/launch_budget.py", "model", True),
        (16, "examples/graphs/launch_cost.py", "chain", False)]
    assert sections(REPO / "examples/graphs/launch_budget.py")["model"][0] > 0
