"""Finds the book's examples: every module under ``examples/<chapter>/``."""
from __future__ import annotations

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
    """Topics whose module defines ``measure(lab)``: the ones that produce records."""
    return [t for t in map(topic_name, example_files()) if hasattr(import_topic(t), "measure")]
