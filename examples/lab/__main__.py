"""The lab runner: ``python -m examples.lab run [--all | --stale | TOPIC ...] --out DIR``.

Runs every chosen benchmark on this machine and writes one record per example
to ``DIR/<machine slug>/<topic>/<run id>.json``; ``--repeat N`` makes N independent
runs (fresh processes); ``--stale`` runs exactly the topics whose committed records
(``docs/records``, or ``--book DIR``) no longer match the code. Topics this machine
cannot run (no GPU, too few GPUs, a profiler or package it lacks) are
skipped and write nothing. ``validate DIR`` checks a folder of records; ``compare DIR`` sets its figures beside the
book's (see ``examples/lab/compare.py``).
"""
from __future__ import annotations

import contextlib
import os
import shlex
import sys
import time
from pathlib import Path

from examples.lab.cli import ArgumentParser, fail, failure_line, positive, rank_device


#: Compiler caches a run must not share with an earlier one: with them, a second
#: run would time warm compiles and reuse autotuning, and not be independent.
CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR")
#: The book's committed records, which ``--stale`` compares the code with (``--book`` another).
BOOK = Path(__file__).resolve().parents[2] / "docs" / "records"


def _fresh_caches() -> str:
    """Point each compiler cache not set by the user at a new empty folder (before torch
    loads); return the run's folder that holds them."""
    import atexit
    import shutil
    import tempfile

    root = tempfile.mkdtemp(prefix="lab-caches-")
    for name in CACHE_VARIABLES:
        if name not in os.environ:
            os.environ[name] = os.path.join(root, name.lower())
    # Gone at exit: a run's kernels and builds are of use to no later run (that is why it
    # has its own), and a GPU run leaves hundreds of MiB. Registered before torch loads,
    # so it runs after torch's own exit handlers have stopped the compile workers.
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


def _bytecode_cache(root: str) -> str | None:
    """Where the lab's Python processes keep the bytecode of a torch that has none of its own.

    pip compiles a package's bytecode when it installs it. A torch installed without it,
    where Python may not write it (a folder no one may write to, or PYTHONDONTWRITEBYTECODE
    set, as container images often do), makes every Python process that imports torch
    compile its sources again: about 11 s of one core for the modules a GPU run imports
    (torch, Inductor, Triton), in every run and in each process a run starts (Inductor's
    compile workers, the profilers' and the allocator's children). There the lab keeps one
    bytecode folder for all its runs, in the user's cache (``~/.cache/python-to-silicon``,
    or ``XDG_CACHE_HOME``; under ``root``, the run's own folder, where that cannot be made)
    and nowhere near the installed sources: the first process compiles, every later one
    reads. Bytecode is not a compiler cache: it is what pip would have written, the same
    for every run (Python checks each file against its source), so no figure changes and
    runs stay independent; only the seconds a run takes change. Returns the folder, or None
    where nothing needed doing (torch has its bytecode, Python writes it beside torch on
    the first import, torch is not installed, or PYTHONPYCACHEPREFIX is already set).
    """
    import importlib.util

    if os.environ.get("PYTHONPYCACHEPREFIX") or sys.pycache_prefix:
        return None
    spec = importlib.util.find_spec("torch")  # finds the package without importing it
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        return None
    if os.path.exists(importlib.util.cache_from_source(spec.origin)):
        return None
    if not sys.dont_write_bytecode and _can_write(os.path.dirname(spec.origin)):
        return None  # Python writes torch's bytecode beside it on the first import
    folder = _user_bytecode_folder() or os.path.join(root, "bytecode")
    os.makedirs(folder, exist_ok=True)
    # This process (read at each import) and the processes it starts (their environment).
    sys.pycache_prefix, sys.dont_write_bytecode = folder, False
    os.environ["PYTHONPYCACHEPREFIX"] = folder
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    return folder


def _user_bytecode_folder() -> str | None:
    """The lab's bytecode folder in the user's cache, made if need be; None if it cannot be."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = os.path.join(base, "python-to-silicon", "bytecode")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return None
    return folder if _can_write(folder) else None


def _can_write(folder: str) -> bool:
    """Whether a file can be made in ``folder``: tried, since a permission check can say
    yes where the file system then refuses (a read-only mount seen by root). The file
    is gone again when this returns."""
    import tempfile

    try:
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


def _run(args) -> int:
    if args.repeat > 1:
        return _repeat(args)
    bytecode = _bytecode_cache(_fresh_caches())
    if bytecode and os.environ.get("LAB_TRACE") == "1":
        print(f"[lab] torch has no bytecode and Python may not write it there: this run keeps it in {bytecode}",
              file=sys.stderr, flush=True)
    import torch
    from tqdm import tqdm

    if not torch.cuda.is_available():
        # Triton picks compiler or interpreter once, at its first import, and the first topic
        # to import it would decide for all: without a GPU, the interpreter that every topic's
        # CPU path runs on (as compile.triton_kernels asks, were it first).
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from examples.lab.provenance import run_id
    from examples.lab.registry import measured_topics

    topics = _topics(args, measured_topics())
    if not topics:
        print("no topic to run: every committed record matches the code")
        return 0
    _freeze_imported(topics)
    if args.device == "cuda" and not torch.cuda.is_available():
        fail("python -m examples.lab run: error: --device cuda: no CUDA GPU is visible")
    if torch.version.hip and args.device != "cpu" and torch.cuda.is_available():
        from examples.lab.hardware import rocm_refusal

        fail(f"python -m examples.lab run: error: {rocm_refusal(torch.version.hip)}")
    device = rank_device(torch.device("cuda" if args.device != "cpu" and torch.cuda.is_available() else "cpu"))
    if args.memory_limit is not None:
        _limit_memory(device, args.memory_limit)
    command = shlex.join(["python", "-m", "examples.lab", *sys.argv[1:]])

    failures, written, skipped, started = [], [], [], time.perf_counter()
    bar = tqdm(topics, unit="topic", file=sys.stderr, dynamic_ncols=True)
    try:
        _run_topics(args, bar, device, command, started, written, skipped, failures)
    except KeyboardInterrupt:
        # Ctrl-C: every record written so far is whole (write_record renames a finished file
        # into place), the topic that was running wrote none; say so in one line, as a shell's 130.
        bar.close()
        done = len(written) + len(skipped) + len(failures)
        print(f"interrupted after {done} topics; {len(written)} records written to {args.out}", file=sys.stderr)
        return EXIT_INTERRUPTED
    bar.close()
    for path, seconds in written:
        print(f"wrote {path} ({seconds:.1f} s)")
    for line in skipped:
        print(f"skipped {line}")
    for line in failures:
        print(f"FAILED {line}", file=sys.stderr)
    print(f"run {run_id()}: {len(written)} records in {time.perf_counter() - started:.0f} s, "
          f"{len(skipped)} skipped, {len(failures)} failed")
    return 1 if failures else 0


#: ``--model``: the keys of ``examples/capstone/model.MODELS`` (a test holds them equal), written
#: out so that ``--help`` answers without importing torch.
MODEL_CHOICES = ("llama3-8b", "llama3.2-3b", "llama3.2-1b")

#: The exit status of a run stopped by Ctrl-C (SIGINT), as a shell reports it: 128 + 2.
EXIT_INTERRUPTED = 130


def _limit_memory(device, limit_gib: float) -> None:
    """``--memory-limit``: act as a smaller card (``memory.cap_allocator``); each topic's need is
    checked against it too. A topic's own processes (the profilers', the ranks') are not capped."""
    from examples.lab import memory

    if device.type != "cuda":
        fail("python -m examples.lab run: error: --memory-limit needs a CUDA GPU; this run is on the CPU")
    try:
        memory.cap_allocator(device, limit_gib)
    except ValueError as exc:
        fail(f"python -m examples.lab run: error: {exc}")


def _run_topics(args, bar, device, command: str, started: float, written: list, skipped: list,
                failures: list) -> None:
    """Run each topic of ``bar`` and write its record, appending to ``written``, ``skipped`` and
    ``failures`` as it goes (so that an interrupt leaves them telling what was done)."""
    from examples.lab import hardware, memory
    from examples.lab.harness import CheckFailed, Unavailable, missing_gpus, requires_cuda, run_measurement
    from examples.lab.records import RecordError, write_record
    from examples.lab.registry import import_topic

    needs = memory.needs() if device.type == "cuda" else {}
    if device.type == "cuda" and not needs and not args.quick:
        print(f"[lab] no table of GPU memory needs ({memory.NEEDS_FILE.name}): no topic is checked before "
              "it starts; one that runs out of memory fails in one line", file=sys.stderr, flush=True)
    gpu = _gpu_name(device)

    topics = list(bar.iterable)
    poisoned_by = None  # a topic whose CUDA error left this process's context unusable
    kept_by = None  # the module that kept what it built for the next topic (its SHARES_WITH)
    for position, topic in enumerate(bar):
        kept_for_this, kept_by = kept_by, None
        try:
            bar.set_description(topic)
            if poisoned_by:
                failures.append(f"{topic}: not run: {poisoned_by}'s CUDA error ends every later topic of this "
                                f"process (run it again alone: python -m examples.lab run {topic} --out {args.out})")
                continue
            if os.environ.get("LAB_TRACE") == "1":
                print(f"[lab] {topic} begins at {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
            try:
                module = import_topic(topic)
            except Exception as exc:  # noqa: BLE001 - a topic that cannot even load is one FAILED line
                failures.append(f"{topic}: cannot be imported: {failure_line(exc)}")
                continue
            # A topic this machine cannot run writes no record: an empty one would say nothing.
            if requires_cuda(module) and device.type != "cuda":
                skipped.append(f"{topic}: needs a CUDA GPU")
                continue
            missing = missing_gpus(module, device) or hardware.missing(topic, device, gpu)
            if missing:
                skipped.append(f"{topic}: {missing}")
                continue
            model = args.model if hasattr(module, "configure") else None
            if model:
                module.configure(args)
            if device.type == "cuda" and not args.quick:
                _free_memory(device)  # what earlier topics left is not this one's room, nor its peak
            # A set-up kept for this topic is its own room: its need counts the set-up it shares.
            room = memory.available(device, args.memory_limit, live_is_room=kept_for_this is not None) \
                if device.type == "cuda" else None
            need = needs.get(memory.need_key(topic, model))
            too_big = None if room is None or args.quick else memory.does_not_fit(need, room, gpu)
            if too_big:
                smaller = memory.smaller_model_that_fits(topic, needs, room) if hasattr(module, "configure") else None
                skipped.append(f"{topic}: {too_big}{smaller or ''}")
                continue
            watching = device.type == "cuda" and not args.quick and memory.PeakWatch.wanted()
            watch = memory.PeakWatch() if watching else contextlib.nullcontext()
            try:
                with watch:
                    record = run_measurement(module, device=device, quick=args.quick, command=command,
                                             on_case=lambda text: bar.set_postfix_str(text[:60]))
            except Unavailable as exc:
                skipped.append(f"{topic}: {exc}")
                continue
            except CheckFailed as exc:
                failures.append(f"{topic}: correctness check failed: {exc}")
                continue
            except RecordError as exc:
                failures.append(f"{topic}: {exc}")
                continue
            except Exception as exc:  # noqa: BLE001 - any error of one topic is its one line; the others run
                if device.type == "cuda" and memory.is_out_of_memory(exc):
                    failures.append(f"{topic}: {memory.out_of_memory_line(exc, need, room, gpu)}")
                    exc.__traceback__ = None  # its frames hold the failed topic's tensors
                    _free_memory(device)  # what the failed topic left is garbage now: the next topics run
                    continue
                failures.append(f"{topic}: {failure_line(exc)}")
                if "CUDA error" in str(exc) or not _device_usable(device):
                    poisoned_by = topic  # sticky: every later CUDA call of this process fails the same way
                continue
            finally:
                kept_by = _release_shared(module, topics, position)
            if watching:
                _report_peak(memory.need_key(topic, model), watch.peak, gpu, args.memory_limit)
            try:
                written.append((write_record(args.out, record), record.run.wall_s))
            except RecordError as exc:  # a figure the loader would refuse is never written
                failures.append(f"{topic}: {exc}")
            except OSError as exc:
                failures.append(f"{topic}: cannot write its record under {args.out}: {exc.strerror or exc}")

        finally:
            # What was kept for this topic goes now: it was skipped, failed, or ran and let it go
            # (a second release frees nothing), unless this topic keeps it for the next in turn.
            if kept_for_this is not None and kept_by is None:
                _release(kept_for_this)

def _gpu_name(device) -> str:
    import torch

    return torch.cuda.get_device_name(device) if device.type == "cuda" else "this machine"


def _free_memory(device) -> None:
    """Free what earlier topics left: the allocator's cached blocks, and the CUDA graphs that
    torch.compile's "reduce-overhead" mode recorded (compile.modes, graphs.decode_loop), whose
    memory pool the process keeps until they are reset (about 0.9 GiB on an H200 after
    compile.modes: it counted in every later topic's peak, and it left a small card less room).
    A graph a topic captured itself (torch.cuda.CUDAGraph, as Chapter 9's kept set-up) stays."""
    import gc

    import torch

    try:
        from torch._inductor.cudagraph_trees import reset_cudagraph_trees
    except ImportError:  # another torch: its graphs stay until the process ends
        reset_cudagraph_trees = None
    try:
        if reset_cudagraph_trees is not None:
            reset_cudagraph_trees()
        gc.collect()
        torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001 - a context that cannot free says so at the next topic
        pass


def _report_peak(topic: str, peak: int | None, gpu: str, limit_gib: float | None) -> None:
    """The GPU memory a topic took (``examples/lab/memory.py``), measured only where
    ``LAB_MEMORY_PEAKS`` names a file: one JSON line appended to it (how the book's table of
    needs is made: ``python -m examples.lab.memory FILE ...``), and a trace line. A run under
    ``--memory-limit`` says so: a topic that parks what it can took less there."""
    import json

    from examples.lab.memory import gib

    if peak is None:
        return
    if os.environ.get("LAB_TRACE") == "1":
        print(f"[lab] {topic} took {gib(peak)} of GPU memory at its peak", file=sys.stderr, flush=True)
    line = {"topic": topic, "peak_bytes": peak, "gpu": gpu}
    if limit_gib is not None:
        line["limit_gib"] = limit_gib
    with open(os.environ["LAB_MEMORY_PEAKS"], "a") as out:  # set: PeakWatch.wanted() said so
        out.write(json.dumps(line) + "\n")


def _freeze_imported(topics: list[str]) -> None:
    """Import the harness and the chosen topics (and the compiler stack, where one of them
    compiles), then take what is alive out of the garbage collector's walks: torch and those
    modules (classes, functions: alive until the process ends), a few hundred thousand objects.
    The harness starts each topic with a full collection, which would walk them all again:
    0.2 to 0.4 s a topic. It still frees all that a topic left behind (made
    after this point), so no figure changes, only the seconds between topics. Unfrozen at exit,
    so that the interpreter's last collection finalizes them as usual."""
    import atexit
    import gc

    from examples.lab import harness  # noqa: F401 - imported before the freeze, as the topics are
    from examples.lab.registry import import_topic

    for topic in topics:
        try:
            import_topic(topic)
        except Exception:  # noqa: BLE001 - the run reports a topic that cannot load, in its turn
            pass
    if any(map(_compiles, topics)):
        _import_compiler_stack()
    gc.collect()
    gc.freeze()
    atexit.register(gc.unfreeze)


#: What the first ``torch.compile`` of a process imports (Dynamo, AOTAutograd, Inductor and
#: its code generators, Triton): about 200,000 objects, which the collection at the start of
#: every later topic would walk again (0.2 to 0.4 s a topic) unless they are frozen with the rest.
COMPILER_STACK = ("torch._dynamo", "torch._functorch.aot_autograd", "torch._inductor.compile_fx",
                  "torch._inductor.scheduler", "torch._inductor.codegen.triton",
                  "torch._inductor.select_algorithm", "triton")


def _compiles(topic: str) -> bool:
    """Whether a topic's measurement compiles (``torch.compile``) or runs Triton, read from its
    sources: a run of topics that never do is spared importing the compiler stack."""
    from examples.lab.provenance import source_files
    from examples.lab.registry import EXAMPLES_ROOT

    path = EXAMPLES_ROOT.joinpath(*topic.split(".")).with_suffix(".py")
    return path.is_file() and any(word in file.read_text() for file in source_files(path)
                                  if file.parent.name != "lab" for word in ("torch.compile", "triton"))


def _import_compiler_stack() -> None:
    """Import :data:`COMPILER_STACK` now, before the freeze, rather than at the first compile:
    the same modules, imported once either way; only when changes."""
    import importlib

    for name in COMPILER_STACK:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - missing or broken here (Triton on a Mac): the topic says so
            pass


def _device_usable(device) -> bool:
    """Whether the GPU still runs work after a topic failed: a sticky error (an illegal
    address, a failed cuBLAS or Triton launch) fails every later CUDA call of the process."""
    if device.type != "cuda":
        return True
    import torch

    try:
        torch.cuda.synchronize(device)
        return torch.ones(1, device=device).add_(1).item() == 2.0
    except Exception:  # noqa: BLE001 - any error here means the context is gone
        return False


def _release_shared(module, topics: list[str], position: int):
    """A topic (``topics[position]``) may keep what it built for the topic after it
    (``SHARES_WITH``, its ``release()``); when that topic does not come next, it is freed now.
    Returns ``module`` where it keeps it (the runner frees it after the next topic), else None."""
    if getattr(module, "release", None) is None:
        return None
    following = topics[position + 1:position + 2]
    if set(following) & set(getattr(module, "SHARES_WITH", ())):
        return module
    _release(module)
    return None


def _release(module) -> None:
    try:
        module.release()
    except Exception:  # noqa: BLE001 - a context a CUDA error broke frees nothing; the next topic says so
        pass


def _topics(args, available: list[str]) -> list[str]:
    if args.all + args.stale + bool(args.topics) != 1:
        fail("python -m examples.lab run: error: name topics or give --all or --stale (one of the three)")
    if args.book is not None and not args.stale:
        fail("python -m examples.lab run: error: --book DIR goes with --stale (the records it compares the code with)")
    unknown = sorted(set(args.topics) - set(available))
    if unknown:
        fail(f"python -m examples.lab run: error: unknown topic {unknown[0]!r} (known: {', '.join(available)})")
    if args.stale:
        book = BOOK if args.book is None else args.book
        if not book.is_dir():
            fail(f"python -m examples.lab run: error: --book {book}: no such folder")
        return stale_topics(available, book, slug=_this_machine(args.device))
    return available if args.all else args.topics


def _this_machine(device: str) -> str | None:
    """The records slug of the GPU this run would measure on (None on the CPU)."""
    import torch

    from examples.lab.provenance import slugify

    if device == "cpu" or not torch.cuda.is_available():
        return None
    return slugify(torch.cuda.get_device_name())


def stale_topics(available: list[str], book, slug: str | None = None) -> list[str]:
    """Topics with no committed record, or whose newest run on some machine was measured by
    code that has changed since (the example, an example module it imports, the harness).

    On a GPU (``slug``, its records folder's name) only that machine's records count, and a
    topic needs ``records.RUNS_PER_KIND`` current runs there: a topic stale on the H200 is
    re-run there, not on an H100, and one fresh run beside stale ones is not enough.

    A record that only says it skipped its topic (the one-GPU runs of multi-GPU topics once
    wrote these) measured nothing, so it neither keeps a topic current nor makes it stale.
    """
    from examples.lab.provenance import REPO_ROOT, source_sha256
    from examples.lab.records import RUNS_PER_KIND, RecordError, load_records

    try:
        records = load_records(book)
    except RecordError as exc:
        fail(f"invalid record: {exc}", status=1)
    newest: dict[tuple[str, str], object] = {}
    for record in records:
        if not record.results and "skipped" in record.notes:
            continue
        key = (record.topic, record.machine.slug)
        if key not in newest or record.run.date > newest[key].run.date:
            newest[key] = record
    hashes: dict[str, str | None] = {}  # source -> its hash now (None: gone); many runs share one

    def current(record) -> bool:
        if record.source not in hashes:
            path = REPO_ROOT / record.source
            hashes[record.source] = source_sha256(path) if path.is_file() else None
        return record.source_sha256 == hashes[record.source]

    stale = []
    for topic in available:
        if slug is not None:
            mine = [r for r in records if r.topic == topic and r.machine.slug == slug
                    and (r.results or "skipped" not in r.notes)]
            if sum(map(current, mine)) < RUNS_PER_KIND:
                stale.append(topic)
            continue
        runs = [r for (t, _), r in newest.items() if t == topic]
        if not runs or not all(map(current, runs)):
            stale.append(topic)
    return stale


def _repeat(args) -> int:
    """``--repeat N``: N independent runs, each a fresh process with its own run id, one after another."""
    import os
    import subprocess

    from examples.lab.registry import measured_topics

    # A bad topic fails once, before any run starts; nothing stale is said once, not N times.
    topics = _topics(args, measured_topics())
    if not topics:
        print("no topic to run: every committed record matches the code")
        return 0
    # Drop "--repeat N" / "--repeat=N" and run the rest as it was given. With --stale, every
    # run gets the topics found stale now, by name: with --out docs/records the first run
    # would make them current, and the runs after it would find nothing to run.
    dropped = {"--repeat"} | ({"--stale", "--book"} if args.stale else set())
    child: list[str] = []
    skip_next = False
    for a in sys.argv[1:]:
        if skip_next:
            skip_next = False
            continue
        if a in dropped:
            skip_next = a != "--stale"  # the others take a value
            continue
        if a.startswith(tuple(f"{d}=" for d in dropped)):
            continue
        child.append(a)
    if args.stale:
        child += topics
    env = {k: v for k, v in os.environ.items() if k != "LAB_RUN_ID"}  # each child makes its own id
    status, started = 0, time.perf_counter()
    for i in range(1, args.repeat + 1):
        print(f"== run {i} of {args.repeat} ==", flush=True)
        try:
            code = subprocess.call([sys.executable, "-m", "examples.lab", *child], env=env)
        except KeyboardInterrupt:  # the run itself got Ctrl-C too and said what it had written
            print(f"interrupted in run {i} of {args.repeat}; records of finished topics are in {args.out}",
                  file=sys.stderr)
            return EXIT_INTERRUPTED
        if code == EXIT_INTERRUPTED:
            print(f"interrupted in run {i} of {args.repeat}; records of finished topics are in {args.out}",
                  file=sys.stderr)
            return EXIT_INTERRUPTED
        status = status or code
    print(f"{args.repeat} runs in {time.perf_counter() - started:.0f} s" + ("" if status == 0 else ", some failed"))
    return status


def _validate(args) -> int:
    from examples.lab.records import RecordError, load_record, record_files

    if not args.dir.is_dir():
        fail(f"invalid record: {args.dir}: no such records folder", status=1)
    records, errors = 0, []
    for path in record_files(args.dir):  # every file is checked: one line per invalid one
        try:
            load_record(path)
            records += 1
        except RecordError as exc:
            errors.append(f"invalid record: {exc}")
        except OSError as exc:
            errors.append(f"invalid record: {path}: cannot be read ({exc.strerror or exc})")
    if errors:
        fail("\n".join(errors), status=1)
    if not records:
        fail(f"{args.dir}: no records (expected <machine>/<topic>/<run>.json)", status=1)
    print(f"{records} records valid under {args.dir}")
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
    run.add_argument("--stale", action="store_true",
                     help="the topics whose committed records no longer match the code (or that have none)")
    run.add_argument("--book", type=Path, default=None, metavar="DIR",
                     help="with --stale: the committed records (default: docs/records)")
    run.add_argument("--out", type=Path, required=True, metavar="DIR", help="records folder")
    run.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    run.add_argument("--quick", action="store_true", help="small sizes and few repetitions")
    run.add_argument("--repeat", type=positive(int), default=1, metavar="N",
                     help="N independent runs, each in a fresh process (default 1)")
    run.add_argument("--memory-limit", type=positive(float), default=None, metavar="GIB",
                     help="act as a GPU with this much memory: cap torch's allocator and skip "
                          "the topics that need more")
    run.add_argument("--model", choices=MODEL_CHOICES, default=None,
                     help="the Llama shape Chapter 9's topics decode (default: llama3-8b, the "
                          "book's; llama3.2-3b for a 16 GiB GPU, llama3.2-1b for 8 to 12 GiB)")
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
    try:
        return args.handler(args)
    except KeyboardInterrupt:  # before the first topic (importing torch) or in validate/compare
        print(f"python -m examples.lab {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    raise SystemExit(main())
