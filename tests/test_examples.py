"""Every example runs on CPU, the way CI and a reader without a GPU run it.

* measured examples (``measure(lab)``): ``--quick --device cpu --json PATH`` exits 0
  and writes a record that validates; one that sets ``REQUIRES_CUDA = True`` says in
  one line that it needs a CUDA GPU and exits 0 (and refuses ``--device cpu``);
* calculators (``EXAMPLE_ARGV``): run with those arguments, exit 0;
* every example: a bad flag is one line on stderr and exit 2, no traceback.

Each runs in its own process with no GPU visible, so the results are the same on
a GPU machine.
"""
from __future__ import annotations

import importlib
import inspect
import json
import math

import pytest

from examples.lab.registry import example_files, topic_name

TOPICS = [topic_name(path) for path in example_files()]
TIMEOUT_S = 300
#: Examples whose own test module runs exactly this command (``python -m ... --quick
#: --device cpu --json``, through ``cli.quick_record``) in a fixture or a test, and checks its
#: record more closely: run once, there.
RUN_BY_THEIR_OWN_TEST = {"ecosystem.fp8_training": ("tests.test_fp8_training", "quick_run"),
                         "collectives.ddp_probe": ("tests.test_ddp_probe", "quick_run"),
                         "collectives.ddp_overlap": ("tests.test_collectives", "test_ddp_overlap_record_on_gloo"),
                         "collectives.ddp_levers": ("tests.test_collectives", "test_ddp_levers_record_on_gloo"),
                         "collectives.ddp_host": ("tests.test_collectives", "test_ddp_host_record_on_gloo"),
                         "collectives.nccl_latency": ("tests.test_collectives", "test_nccl_latency_record_on_gloo"),
                         "compile.triton_kernels": ("tests.test_compile",
                                                    "test_triton_kernels_record_compares_kernels_in_rounds"),
                         "blas.levels": ("tests.test_blas", "test_levels_record_has_the_pages_figures"),
                         "ecosystem.triton_op": ("tests.test_triton_op", "test_cpu_record_has_the_twin_only"),
                         "capstone.read_roof": ("tests.test_read_roof", "test_cpu_record_has_copy_the_reads_and_the_roof")}


def test_there_are_examples():
    assert TOPICS, "registry.example_files() found no example under examples/<chapter>/"


@pytest.mark.parametrize("topic", sorted(RUN_BY_THEIR_OWN_TEST))
def test_an_example_left_to_its_own_test_is_run_there(topic):
    module, function = RUN_BY_THEIR_OWN_TEST[topic]
    tests = importlib.import_module(module)
    runs = getattr(tests, function, None)
    source = inspect.getsource(runs) if callable(runs) else ""
    assert f'cli.quick_record("{topic}", ' in source or (
        "cli.quick_record(TOPIC." in source and getattr(tests, "TOPIC", None) == f"examples.{topic}"), (
        f"{module}.{function} no longer runs {topic} through cli.quick_record: put it back in test_runs_on_cpu")


def _module(topic: str):
    return importlib.import_module(f"examples.{topic}")


@pytest.mark.parametrize("topic", [t for t in TOPICS if t not in RUN_BY_THEIR_OWN_TEST])
def test_runs_on_cpu(topic, tmp_path, cli):
    module = _module(topic)
    measured = callable(getattr(module, "measure", None))
    argv = getattr(module, "EXAMPLE_ARGV", None)
    needs_cuda = bool(getattr(module, "REQUIRES_CUDA", False))
    assert measured or argv is not None, (
        f"examples/{topic.replace('.', '/')}.py defines neither measure(lab) nor EXAMPLE_ARGV, "
        "so CI cannot run it"
    )
    assert callable(getattr(module, "main", None)), f"examples.{topic} has no main()"

    if measured:
        out = tmp_path / "record.json"
        if needs_cuda:
            proc = cli.run("-m", f"examples.{topic}", "--quick", "--json", out, timeout=TIMEOUT_S)
            assert proc.returncode == 0, cli.explain(proc)
            lines = proc.stdout.splitlines()
            assert len(lines) == 1 and "needs a CUDA GPU" in lines[0], cli.explain(proc)
            assert not out.exists(), "a GPU-only example wrote a record without a GPU"
            refused = cli.run("-m", f"examples.{topic}", "--quick", "--device", "cpu", timeout=TIMEOUT_S)
            assert "CUDA GPU" in cli.one_line_error(refused)
            return
        cli.quick_record(topic, tmp_path, timeout=TIMEOUT_S)
        return

    proc = cli.run("-m", f"examples.{topic}", *argv, timeout=TIMEOUT_S)
    assert proc.returncode == 0, cli.explain(proc)
    assert proc.stdout.strip(), f"examples.{topic} {' '.join(argv)} printed nothing\n{cli.explain(proc)}"


@pytest.mark.parametrize("topic", TOPICS)
def test_bad_flag_is_one_line(topic, capsys):
    """In-process, through ``main(argv)``: test_runs_on_cpu runs each module as ``python -m``
    already, and a process per example here only re-imported torch (a minute and a half of CI)."""
    module = _module(topic)
    # A calculator gets its good arguments too, so the bad flag is the only error.
    argv = getattr(module, "EXAMPLE_ARGV", None) or []
    try:
        status = module.main([*argv, "--no-such-flag"])
    except SystemExit as exit_info:
        status = exit_info.code
    out, err = capsys.readouterr()
    shown = f"examples.{topic} {' '.join(argv)} --no-such-flag: exit {status}\n--- stdout\n{out}--- stderr\n{err}"
    assert status == 2, shown
    assert "Traceback" not in out + err, shown
    lines = err.splitlines()
    assert len(lines) == 1 and "--no-such-flag" in lines[0], f"expected exactly one line on stderr\n{shown}"


# -- the launch-budget calculator (chapter 5's worked numbers) ------------------
BUDGET = "examples.graphs.launch_budget"
BUDGET_ARGS = {"--layers": "32", "--kernels-per-layer": "8", "--launch-us": "10", "--tokens-per-second": "50"}


def _argv(**changes: str | None) -> list[str]:
    args = dict(BUDGET_ARGS)
    for flag, value in changes.items():
        flag = "--" + flag.replace("_", "-")
        if value is None:
            del args[flag]
        else:
            args[flag] = value
    # --flag=value so that "-1" is read as a value, never as a flag
    return [f"{flag}={value}" for flag, value in args.items()]


def test_launch_budget_json(cli):
    proc = cli.run("-m", BUDGET, *_argv(), "--json")
    assert proc.returncode == 0, cli.explain(proc)
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, f"--json prints one JSON object\n{cli.explain(proc)}"
    result = json.loads(lines[0])
    assert set(result) == {"overhead_ms", "budget_ms", "fraction", "verdict"}
    assert result["verdict"] == "within budget"
    assert result["overhead_ms"] == pytest.approx(2.56)
    assert result["budget_ms"] == pytest.approx(20.0)
    assert result["fraction"] == pytest.approx(0.128)


def test_launch_budget_text(cli):
    proc = cli.run("-m", BUDGET, *_argv())
    assert proc.returncode == 0, cli.explain(proc)
    assert "2.56 ms" in proc.stdout and "20 ms" in proc.stdout and "12.8%" in proc.stdout, cli.explain(proc)


@pytest.mark.parametrize("flag", [f.removeprefix("--").replace("-", "_") for f in BUDGET_ARGS])
@pytest.mark.parametrize("value", ["0", "-1", "nan", "abc", "inf", None],
                         ids=["zero", "negative", "nan", "text", "infinite", "missing"])
def test_launch_budget_rejects(flag, value, capsys):
    """Bad input: one line on stderr, exit 2 (in-process: argparse does the work).

    Infinity is bad input too: ``--tokens-per-second inf`` makes the budget 0 ms
    and the fraction a division by zero.
    """
    from examples.graphs.launch_budget import main

    with pytest.raises(SystemExit) as exit_info:
        main(_argv(**{flag: value}))
    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert "--" + flag.replace("_", "-") in err, err


def test_launch_budget_model_matches_arithmetic():
    from examples.graphs.launch_budget import launch_budget

    b = launch_budget(layers=80, kernels_per_layer=12, launch_us=4.5, tokens_per_second=30)
    assert b.overhead_ms == pytest.approx(80 * 12 * 4.5 / 1e3)
    assert b.budget_ms == pytest.approx(1e3 / 30)
    assert b.fraction == pytest.approx(b.overhead_ms / b.budget_ms)
    assert math.isfinite(b.fraction)
