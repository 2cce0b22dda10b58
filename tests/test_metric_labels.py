"""Every identifier a reader could meet has words: ``examples/lab/metrics.py`` against the records and pages.

A metric of any committed record, or one that a page's shortcode names (a column a
stale record lacks still gets a header), must have a label; every case key of the
records must have words or be declared a word already. So a new metric, or a new case
key, cannot land without the words its tables will show.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "overrides" / "hooks"))

from examples.lab import metrics  # noqa: E402
from examples.lab.provenance import BOOKKEEPING, source_files  # noqa: E402
from lab_site import generated, shortcodes  # noqa: E402


def _records() -> list[dict]:
    found = [json.loads(p.read_text(encoding="utf-8")) for p in sorted((REPO / "docs" / "records").rglob("*.json"))]
    assert len(found) > 100, "the committed records are missing: the label check would be vacuous"
    return found


def _named_by_pages() -> set[tuple[str, str]]:
    """(topic, metric) of every lab:table, lab:value, lab:claim and lab:plot of the book's pages."""
    named: set[tuple[str, str]] = set()
    for path in sorted((REPO / "docs").glob("*.md")):
        page = generated.Page(path.name, path.name, path.read_text(encoding="utf-8"))
        for req in generated.requests_of(page):
            if isinstance(req, shortcodes.TableRequest) and req.metrics:
                named.update((req.topic, m) for m in req.metrics)
            elif isinstance(req, (shortcodes.ValueRequest, shortcodes.ClaimRequest)):
                named.add((req.topic, req.metric))
            elif isinstance(req, shortcodes.PlotRequest):
                named.add((req.topic, req.y))
    return named


def test_every_metric_of_the_records_and_the_pages_has_words():
    used = {(r["topic"], m) for r in _records() for row in r["results"] for m in row["metrics"]}
    named = _named_by_pages()
    lacking = []
    for topic, name in sorted(used | named):
        try:
            metrics.metric_label(topic, name)
        except metrics.UnknownLabel:
            lacking.append(f"{topic}: {name}")
    assert not lacking, ("metrics without words (add them to METRICS in examples/lab/metrics.py): "
                         + ", ".join(lacking))


def test_every_case_key_of_the_records_has_words_or_is_a_word():
    keys = {k for r in _records() for row in r["results"] for k in row["case"]}
    named = metrics.WORD_KEYS | set(metrics.CASE_KEYS) | {k for m in metrics.TOPIC_CASE_KEYS.values() for k in m}
    assert not keys - named, (f"case keys neither given words (CASE_KEYS) nor declared words (WORD_KEYS) in "
                              f"examples/lab/metrics.py: {', '.join(sorted(keys - named))}")
    assert not metrics.WORD_KEYS & set(metrics.CASE_KEYS), "a key is either a word or given words, not both"


def test_size_keys_hold_numbers_in_every_record():
    for record in _records():
        for row in record["results"]:
            for key, unit in metrics.SIZE_KEYS.items():
                value = row["case"].get(key)
                assert value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)), \
                    f"{record['topic']}: size key {key}={value!r} is not a number of {unit}"


def test_labels_are_words_not_identifiers():
    for name, words in [*metrics.METRICS.items(), *metrics.CASE_KEYS.items(),
                        *(i for m in (*metrics.TOPIC_METRICS.values(), *metrics.TOPIC_CASE_KEYS.values())
                          for i in m.items())]:
        assert "_" not in words and words.strip() == words and words, f"{name}: label {words!r}"
    assert {"ms_per_token", "algbw", "per_call"} <= metrics.not_words()
    assert "rate" not in metrics.not_words()  # labelled "rate": a word


def test_case_value_words_are_words_for_values_the_records_hold():
    held = {(k, v) for r in _records() for row in r["results"] for k, v in row["case"].items() if isinstance(v, str)}
    keys = metrics.WORD_KEYS | set(metrics.CASE_KEYS) | {k for m in metrics.TOPIC_CASE_KEYS.values() for k in m}
    for key, values in metrics.CASE_VALUES.items():
        assert key in keys, f"CASE_VALUES names {key!r}, which is no case key"
        for value, words in values.items():
            assert "_" not in words and words.strip() == words and words != value, f"{key}={value}: {words!r}"
            assert (key, value) in held, f"CASE_VALUES gives words to {key}={value!r}, which no record holds"
    assert metrics.value_label("collective", "all_gather") == "all-gather"
    assert metrics.value_label("collective", "broadcast") is None and metrics.value_label("bytes", 4) is None
    counts = metrics.COUNT_KEYS | {k for ks in metrics.TOPIC_COUNT_KEYS.values() for k in ks}
    assert not counts & set(metrics.SIZE_KEYS)  # a key is a size or a count, never both
    held_keys = {(r["topic"], k) for r in _records() for row in r["results"] for k in row["case"]}
    for topic, ks in metrics.TOPIC_COUNT_KEYS.items():
        assert all((topic, k) in held_keys for k in ks), f"TOPIC_COUNT_KEYS[{topic!r}] names a key no record holds"


def test_unknown_metric_is_a_one_line_error_naming_the_file():
    with pytest.raises(metrics.UnknownLabel, match=r"^metric 'no_such' of topic t\.x has no label: .*metrics\.py$"):
        metrics.metric_label("t.x", "no_such")
    assert metrics.metric_label("capstone.decode", "ms_per_token") == "time per token"
    assert metrics.metric_label("capstone.decode", "time") == "prefill time"  # a topic's own meaning first


def test_the_labels_module_is_bookkeeping_and_no_measurement_hashes_it():
    assert "examples.lab.metrics" in BOOKKEEPING
    examples = [p for p in (REPO / "examples").rglob("*.py") if p.parent.name != "lab"]
    for path in examples:
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"examples\.lab(\.| import )metrics|from \.+lab import metrics", text), \
            f"{path.relative_to(REPO)} imports the labels: rewording one would stale its records"
    hashed = {p.relative_to(REPO).as_posix() for path in examples[:5] for p in source_files(path)}
    assert "examples/lab/metrics.py" not in hashed
