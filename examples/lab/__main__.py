"""The lab runner: ``python -m examples.lab run [--all | TOPIC ...] --out DIR``.

Runs every chosen benchmark on this machine and writes one record per example
to ``DIR/<machine slug>/<topic>.json``. ``validate DIR`` checks a folder of records; ``compare DIR`` sets its figures beside the
book's (see ``examples/lab/compare.py``).
"""
from __future__ import annotations

import shlex
import sys
import time

from examples.lab.cli import ArgumentParser, fail


def _run(args) -> int:
    import torch
    from tqdm import tqdm

    from examples.lab.harness import CheckFailed, requires_cuda, run_measurement
    from examples.lab.records import RecordError, write_record
    from examples.lab.registry import import_topic, measured_topics

    available = measured_topics()
    if args.all == bool(args.topics):
        fail("python -m examples.lab run: error: name topics or give --all, not both or neither")
    unknown = sorted(set(args.topics) - set(available))
    if unknown:
        fail(f"python -m examples.lab run: error: unknown topic {unknown[0]!r} (known: {', '.join(available)})")
    topics = available if args.all else args.topics
    if args.device == "cuda" and not torch.cuda.is_available():
        fail("python -m examples.lab run: error: --device cuda: no CUDA GPU is visible")
    device = torch.device("cuda" if args.device != "cpu" and torch.cuda.is_available() else "cpu")
    command = shlex.join(["python", "-m", "examples.lab", *sys.argv[1:]])

    failures, written, started = [], [], time.perf_counter()
    bar = tqdm(topics, unit="topic", file=sys.stderr, dynamic_ncols=True)
    for topic in bar:
        bar.set_description(topic)
        module = import_topic(topic)
        if requires_cuda(module) and device.type != "cuda":
            tqdm.write(f"skip {topic}: needs a CUDA GPU", file=sys.stderr)
            continue
        try:
            record = run_measurement(module, device=device, quick=args.quick, command=command,
                                     on_case=lambda text: bar.set_postfix_str(text[:60]))
        except CheckFailed as exc:
            failures.append(f"{topic}: correctness check failed: {exc}")
            continue
        except RecordError as exc:
            failures.append(f"{topic}: {exc}")
            continue
        written.append(write_record(args.out, record))
    bar.close()
    for path in written:
        print(f"wrote {path}")
    for line in failures:
        print(f"FAILED {line}", file=sys.stderr)
    print(f"{len(written)} records in {time.perf_counter() - started:.0f} s, {len(failures)} failed")
    return 1 if failures else 0


def _validate(args) -> int:
    from examples.lab.records import RecordError, load_records

    try:
        records = load_records(args.dir)
    except RecordError as exc:
        fail(f"invalid record: {exc}", status=1)
    if not records:
        fail(f"{args.dir}: no records (expected <machine>/<topic>.json)", status=1)
    print(f"{len(records)} records valid under {args.dir}")
    return 0


def _compare(args) -> int:
    import json

    from examples.lab.compare import compare, text, to_json
    from examples.lab.records import RecordError

    for name, folder in (("DIR", args.dir), ("--book", args.book)):
        if not folder.is_dir():
            fail(f"python -m examples.lab compare: error: {name} {folder}: no such folder")
    try:
        result = compare(args.dir, args.book, args.machine)
    except RecordError as exc:
        fail(f"invalid record: {exc}", status=1)
    except LookupError as exc:
        fail(f"python -m examples.lab compare: error: {exc.args[0]}")
    print(json.dumps(to_json(result), indent=1) if args.json else text(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    from pathlib import Path

    parser = ArgumentParser(prog="python -m examples.lab", description=__doc__.strip().splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run benchmarks and write records")
    run.add_argument("topics", nargs="*", metavar="TOPIC", help="e.g. graphs.decode_loop")
    run.add_argument("--all", action="store_true", help="every benchmark of the book")
    run.add_argument("--out", type=Path, required=True, metavar="DIR", help="records folder")
    run.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    run.add_argument("--quick", action="store_true", help="small sizes and few repetitions")
    run.set_defaults(handler=_run)
    validate = sub.add_parser("validate", help="check every record under a folder")
    validate.add_argument("dir", type=Path, metavar="DIR")
    validate.set_defaults(handler=_validate)
    from examples.lab.compare import BOOK_MACHINE, BOOK_ROOT

    comp = sub.add_parser("compare", help="your records beside the book's: each figure, both values, the ratio")
    comp.add_argument("dir", type=Path, metavar="DIR", help="records folder of a `run --out DIR`")
    comp.add_argument("--book", type=Path, default=BOOK_ROOT, metavar="DIR",
                      help="the book's records folder (default: docs/records)")
    comp.add_argument("--machine", default=BOOK_MACHINE, metavar="SLUG",
                      help=f"the book's machine to compare with (default: {BOOK_MACHINE})")
    comp.add_argument("--json", action="store_true", help="print JSON instead of a table")
    comp.set_defaults(handler=_compare)
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    raise SystemExit(main())
