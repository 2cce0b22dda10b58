"""Finds the book's examples: every module under ``examples/<chapter>/``."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path
from types import ModuleType

EXAMPLES_ROOT = Path(__file__).resolve().parents[1]
#: Packages under examples/ that hold machinery, not chapters.
NOT_CHAPTERS = {"lab"}


def example_files() -> list[Path]:
    """Every example source file, chapter by chapter."""
    return sorted(
        path
        for chapter in EXAMPLES_ROOT.iterdir()
        if chapter.is_dir() and (chapter / "__init__.py").exists() and chapter.name not in NOT_CHAPTERS
        for path in chapter.glob("*.py")
        if not path.name.startswith("_")
    )


def topic_name(path: Path) -> str:
    return f"{path.parent.name}.{path.stem}"


def import_topic(topic: str) -> ModuleType:
    return importlib.import_module(f"examples.{topic}")


def measured_topics() -> list[str]:
    """Topics whose module defines ``measure(lab)``: the ones that produce records.

    Read from each module's source where it tells (``python -m examples.lab run TOPIC`` then
    imports only the topics it runs: importing every example is Dynamo, Inductor, Triton and
    ONNX, seconds of CPU per command); a module whose source does not tell is imported.
    """
    topics = []
    for path in example_files():
        defines = _binds_at_top_level(path, "measure")
        if defines is None:
            defines = hasattr(import_topic(topic_name(path)), "measure")
        if defines:
            topics.append(topic_name(path))
    return topics


def _binds_at_top_level(path: Path, name: str) -> bool | None:
    """Whether importing the module at ``path`` binds ``name`` at its top level (a ``def``, a
    class, an assignment, an import), read from its source. None where the source cannot say
    for sure: a star import, ``globals()``, a module ``__getattr__``, or ``name`` bound or
    deleted inside a compound statement (an ``if``, ``try``, loop or ``with``)."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    bound = False
    for statement in tree.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            # what runs in the module's scope: the name, decorators, defaults, bases; not the body
            head = [getattr(statement, field, None) for field in ("decorator_list", "args", "bases", "keywords")]
            inner = [statement, *(node for part in head if part for item in (part if isinstance(part, list) else [part])
                                  for node in ast.walk(item))]
        elif isinstance(statement, (ast.Import, ast.ImportFrom)):
            if any(alias.name == "*" for alias in statement.names):
                return None
            inner = [statement]
        else:
            inner = list(ast.walk(statement))
        if any(isinstance(node, ast.Name) and node.id == "globals" for node in inner):
            return None
        names = set().union(*map(_bound_names, inner))
        if "__getattr__" in names:
            return None
        if name in names:
            if not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import,
                                          ast.ImportFrom, ast.Assign, ast.AnnAssign, ast.AugAssign)):
                return None
            bound = True
    return bound


def _bound_names(node: ast.AST) -> set[str]:
    """The names one node binds (or deletes) in the scope it is in."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
        return {node.id}
    return set()
