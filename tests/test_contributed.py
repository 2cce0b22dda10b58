"""Records from GPUs the book does not own: a reader's ``docs/records/<their gpu>/`` folder.

A reader contributes their GPU with a pull request that adds its folder beside the book's (README:
"Contribute your GPU"). CI validates it like the book's own records; the build shows it as a further
GPU tab marked *contributed* (``extra.lab.own_machines`` lists the GPUs the book measured itself);
a claim meant to hold everywhere that the contributed GPU contradicts is shown contradicted on the
page, with the record, and does not fail the build (a warning would, under ``--strict``).

The fixture folder is made from real records: the book's H200 runs of ``graphs.launch_cost`` as
they are, and its H100 runs relabelled as an RTX 4090, one of them contradicting a claim of Chapter 5.
"""
from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path

import pytest

from examples.lab.records import BOOK_RECORDS, load_records
from tests.hook_support import REPO  # noqa: F401 - puts the hooks on the import path
from tests.test_build import contradict
from tests.test_site_hook import run

from lab_site import shortcodes

TOPIC = "graphs.launch_cost"
OWN, THEIRS = "nvidia-h200", "nvidia-geforce-rtx-4090"
THEIR_GPU = "NVIDIA GeForce RTX 4090"
#: A claim of Chapter 5 (docs/cuda-graphs.md) about every GPU: no machine= names one.
CLAIM = "<!-- lab:claim graphs.launch_cost speedup >= 4 kernels=1024 mode=graph -->"


@pytest.fixture
def contributed(tmp_path) -> Path:
    """``<tmp>/records``: the book's H200 runs of TOPIC, and a contributed RTX 4090 folder made from its
    H100 runs (one of them contradicting CLAIM)."""
    root = tmp_path / "records"
    shutil.copytree(BOOK_RECORDS / OWN / TOPIC, root / OWN / TOPIC)
    for path in sorted((BOOK_RECORDS / "nvidia-h100-80gb-hbm3" / TOPIC).glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        data["machine"].update(slug=THEIRS, gpu_name=THEIR_GPU, gpu_memory_gib=23.99, sm_count=128)
        (root / THEIRS / TOPIC).mkdir(parents=True, exist_ok=True)
        (root / THEIRS / TOPIC / path.name).write_text(json.dumps(data, indent=1), encoding="utf-8")
    contradict(root / THEIRS, shortcodes.request(shortcodes.parse_text(CLAIM)))
    return root


@pytest.fixture
def hook(contributed, tmp_path, monkeypatch):
    """The records hook as MkDocs loads it, the book's own folder being ``contributed``."""
    from types import SimpleNamespace

    from mkdocs.config import load_config

    config = load_config(str(REPO / "mkdocs.yml"))
    module = config.hooks["overrides/hooks/records.py"]
    monkeypatch.setitem(config.extra, "lab", {"record_roots": [str(contributed)], "primary_machine": OWN,
                                             "own_machines": [OWN, "nvidia-h100-80gb-hbm3"]})
    config.site_dir = str(tmp_path / "site")
    (tmp_path / "site").mkdir()
    module.on_config(config)
    module.on_pre_build(config)
    return SimpleNamespace(module=module, config=config)


def test_the_contributed_folder_validates_as_the_books_own(contributed):
    records = load_records(contributed)
    copied = len(list(contributed.glob(f"*/{TOPIC}/*.json")))  # the book's runs of both GPUs
    assert {r.machine.slug for r in records} == {OWN, THEIRS} and len(records) == copied >= 6


def test_a_contributed_gpu_is_a_further_tab_marked_contributed(hook):
    out = run(hook, f"<!-- lab:table {TOPIC} -->\n", src="cuda-graphs.md")
    tabs = re.findall(r'^===!? "(.*)"$', out, flags=re.M)
    assert tabs == ["NVIDIA H200", f"{THEIR_GPU} · contributed"], tabs
    machines = run(hook, "<!-- lab:generated machines -->\n", src="index.md")
    assert f"{THEIR_GPU} (contributed)" in machines and "NVIDIA H200 (contributed)" not in machines
    # The calculators' GPU presets are the book's own GPUs only.
    assert [g.slug for g in hook.module._book_gpus()] == [OWN]


def test_a_contributed_contradiction_is_shown_on_the_page_not_a_failed_build(hook, caplog):
    with caplog.at_level(logging.INFO, logger="mkdocs.plugins.lab"):
        out = run(hook, f"Replay wins: {CLAIM}\n", src="cuda-graphs.md")
    # No warning: a strict build passes. The finding is an INFO line and on the page.
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert f"is VIOLATED on {THEIRS}" in caplog.text
    assert "H200 ✓" in out and "GeForce RTX 4090 · contributed ✗ VIOLATED" in out
    link = re.search(r'contradicted by a contributed record: <a href="([^"]+)">', out)
    # The run that contradicts it, where the site serves it (relative to the chapter's page).
    newest = sorted((BOOK_RECORDS / "nvidia-h100-80gb-hbm3" / TOPIC).glob("*.json"))[-1].name  # contradict()'s
    assert link and link[1].startswith("../") and link[1].endswith(f"/{THEIRS}/{TOPIC}/{newest}"), out
    report = hook.module.state.claims[-1].to_json()
    assert {v["machine"]: v["holds"] for v in report["verdicts"]} == {OWN: True, THEIRS: False}


def test_the_books_own_gpu_contradicting_a_claim_still_fails_the_build(hook, contributed, caplog):
    contradict(contributed / OWN, shortcodes.request(shortcodes.parse_text(CLAIM)))
    hook.module.on_pre_build(hook.config)
    with caplog.at_level(logging.INFO, logger="mkdocs.plugins.lab"):
        run(hook, f"Replay wins: {CLAIM}\n", src="cuda-graphs.md")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and f"VIOLATED on {OWN}" in warnings[0], warnings


def test_without_own_machines_every_folder_is_the_books(contributed):
    """The setting is what makes a folder contributed: without it, the build is as it always was."""
    from lab_site import store

    loaded = store.load([store.Root(0, contributed, "records", None, False)], REPO)
    assert not any(e.contributed for e in loaded.entries)
    marked = store.load([store.Root(0, contributed, "records", None, False)], REPO, own=[OWN])
    assert {e.slug for e in marked.entries if e.contributed} == {THEIRS}
