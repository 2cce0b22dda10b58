"""Command lines of the examples: the shared flags, one-line errors, tables.

Every measured example runs as ``python -m examples.<chapter>.<topic>`` with
``--device {auto,cpu,cuda}``, ``--quick`` and ``--json [PATH]``. Bad input ends
with one line on stderr and exit status 2, never a traceback.
"""
from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
from pathlib import Path
from types import ModuleType
from typing import NoReturn

from examples.lab.records import Record, dump_record, write_whole

EXIT_USAGE = 2


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors: ``prog: error: message`` and exit 2."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        fail(f"{self.prog}: error: {message}")


def fail(message: str, status: int = EXIT_USAGE) -> NoReturn:
    print(message, file=sys.stderr)
    raise SystemExit(status)


def failure_line(exc: RuntimeError) -> str:
    """A topic's run-time failure (a tool that failed, a CUDA error) as one line: its type and
    first line. With ``LAB_TRACEBACK=1`` in the environment the exception goes on, traceback and all."""
    if os.environ.get("LAB_TRACEBACK"):
        raise exc
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def _finite_number(kind: type, accepts, adjective: str):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {adjective} {kind.__name__}, got {text!r}") from None
        if not (math.isfinite(value) and accepts(value)):  # NaN and inf are never inputs
            raise argparse.ArgumentTypeError(f"must be {adjective} and finite, got {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def positive(kind: type = float):
    """An argparse type: a finite number of ``kind`` greater than zero."""
    return _finite_number(kind, lambda v: v > 0, "positive")


def non_negative(kind: type = float):
    """An argparse type: a finite number of ``kind`` that is zero or more."""
    return at_least(0, kind)


def at_least(minimum: float, kind: type = float):
    """An argparse type: a finite number of ``kind`` no smaller than ``minimum``."""
    words = "non-negative" if minimum == 0 else f"at least {minimum:g}"
    return _finite_number(kind, lambda v: v >= minimum, words)


def add_json_flag(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--json", nargs="?", const="-", metavar="PATH",
        help=f"write {what} as JSON to PATH (or to stdout when PATH is omitted or '-')",
    )


def emit_json(text: str, destination: str) -> None:
    if destination == "-":
        sys.stdout.write(text)
        return
    try:  # whole or not at all, as a record: a run killed mid-write leaves no half file
        write_whole(Path(os.path.abspath(destination)), text)
    except OSError as exc:
        fail(f"--json: cannot write {destination}: {exc.strerror}", status=1)


def resolve_device(choice: str, *, needs_cuda: bool, prog: str):
    """The torch device for ``--device``; ``None`` when there is nothing to run here."""
    import torch

    has_cuda = torch.cuda.is_available()
    if choice == "cuda" and not has_cuda:
        fail(f"{prog}: error: --device cuda: no CUDA GPU is visible to torch {torch.__version__}")
    if choice == "cpu" and needs_cuda:
        fail(f"{prog}: error: --device cpu: this example runs only on a CUDA GPU")
    if choice == "auto":
        if needs_cuda and not has_cuda:
            return None
        choice = "cuda" if has_cuda else "cpu"
    return torch.device(choice)


def rank_device(device):
    """``device``, or under a launcher (torchrun sets ``LOCAL_RANK`` in each rank it starts) this
    rank's own GPU, ``cuda:LOCAL_RANK``, made current: every rank of a node would otherwise time,
    sample and hold a context on GPU 0. A ``LOCAL_RANK`` that names no GPU here is left to the
    example, which says so in one line."""
    import torch

    local = os.environ.get("LOCAL_RANK", "").strip()
    if device.type != "cuda" or not local.isdigit() or int(local) >= torch.cuda.device_count():
        return device
    torch.cuda.set_device(int(local))
    return torch.device("cuda", int(local))


def format_table(record: Record) -> str:
    """The record's rows as an aligned text table (case, metric, median, IQR), then its notes."""
    keys = list(dict.fromkeys(k for row in record.results for k in row.case))
    header = [*keys, "metric", "median", "IQR", "unit"]
    lines = [header]
    for row in record.results:
        for name, m in row.metrics.items():
            iqr = f"{m.iqr:.4g}" if m.iqr is not None else "-"
            lines.append([*(str(row.case.get(k, "")) for k in keys), name, f"{m.median:.4g}", iqr, m.unit])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    table = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in lines]
    notes = [f"{key}: {value}" for key, value in record.notes.items()]
    return "\n".join((table if record.results else []) + notes)


def run_example(module: ModuleType, argv: list[str] | None = None) -> int:
    """``main`` of a measured example: parse the shared flags, measure, report."""
    from examples.lab.harness import CheckFailed, Unavailable, missing_gpus, requires_cuda, run_measurement, topic_of
    from examples.lab.records import RecordError

    topic = topic_of(module)
    prog = f"python -m examples.{topic}"
    parser = ArgumentParser(prog=prog, description=(module.__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                        help="where to run (default: the GPU if there is one)")
    parser.add_argument("--quick", action="store_true", help="small sizes and few repetitions, for CI")
    add_json_flag(parser, "the record (results with provenance)")
    if hasattr(module, "add_arguments"):  # a topic's own flags (Chapter 9's --model)
        module.add_arguments(parser)
    args = parser.parse_args(argv)
    if hasattr(module, "configure"):
        module.configure(args)

    device = resolve_device(args.device, needs_cuda=requires_cuda(module), prog=prog)
    if device is None:
        print(f"{prog}: needs a CUDA GPU and none is visible; nothing to run on this machine")
        return 0
    device = rank_device(device)
    missing = missing_gpus(module, device)
    if missing:
        print(f"{prog}: {missing}; nothing to run on this machine (--device cpu runs it on the CPU)")
        return 0
    command = shlex.join(["python", "-m", f"examples.{topic}", *(sys.argv[1:] if argv is None else argv)])
    try:
        record = run_measurement(module, device=device, quick=args.quick, command=command)
    except Unavailable as exc:
        fail(f"{prog}: {exc}", status=1)
    except CheckFailed as exc:
        fail(f"{prog}: correctness check failed: {exc}", status=1)
    except RecordError as exc:
        fail(f"{prog}: {exc}", status=1)
    except RuntimeError as exc:
        fail(f"{prog}: {failure_line(exc)}", status=1)
    # With the record on stdout, the human summary goes to stderr.
    human = sys.stderr if args.json == "-" else sys.stdout
    print(f"{topic} on {record.machine.gpu_name or record.machine.host_cpu} ({device.type})", file=human)
    print(format_table(record), file=human)
    if args.json:
        emit_json(dump_record(record), args.json)
    return 0
