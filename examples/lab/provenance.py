"""Where a number came from: the machine, the software and the code that measured it.

Everything here degrades to ``None`` when a fact cannot be read (no GPU, no
``nvidia-smi``, no git checkout) rather than guessing.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import platform
import re
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from examples.lab.load import power_limit_w
from examples.lab.records import Machine, Run

REPO_ROOT = Path(__file__).resolve().parents[2]


#: Lab modules that only read, write or describe records: a change to them cannot move a
#: figure, so it does not stale the records measured through them.
BOOKKEEPING = frozenset({"examples.lab.records", "examples.lab.provenance", "examples.lab.cli",
                         "examples.lab.registry", "examples.lab.compare", "examples.lab.__main__",
                         "examples.lab.metrics", "examples.lab.memory", "examples.lab.hardware"})
#: What every measurement runs through, whatever the example imports: the harness that times it.
HARNESS = ("examples.lab.harness",)


def _module_path(name: str) -> Path | None:
    """``examples.lab.timing`` -> its file under the repository (a package -> its ``__init__``)."""
    base = REPO_ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported_examples(path: Path) -> set[str]:
    """Every ``examples.*`` module ``path`` imports, at any depth of its code (a lazy import too)."""
    package = ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts[:-1])
    names = _imported_names(path.read_bytes(), str(path), package)
    return {n for n in names if n.startswith("examples.") and _module_path(n)}


@functools.lru_cache(maxsize=None)
def _imported_names(source: bytes, filename: str, package: str) -> frozenset[str]:
    """The modules a source imports, by name. Cached on the text itself: a site build hashes
    each example's sources about 300 times over (every record's topic walks the modules it
    imports), and parsing them was most of that (about 5 s of CPU a build)."""
    import ast

    names: set[str] = set()
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # a relative import, from the file's own package
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)  # `from examples.lab import timing`
    return frozenset(names)


def source_files(path: Path) -> list[Path]:
    """What a measurement by the example at ``path`` runs: the example, every example module it
    imports (transitively), and the harness modules, less the bookkeeping ones.

    >>> [p.relative_to(REPO_ROOT).as_posix() for p in source_files(REPO_ROOT / "examples/lab/stats.py")]
    ['examples/lab/harness.py', 'examples/lab/kernels.py', 'examples/lab/load.py', 'examples/lab/stats.py',
     'examples/lab/timing.py']
    """
    path = path.resolve()
    seen: dict[str, Path] = {}
    todo = [path, *filter(None, map(_module_path, HARNESS))]
    while todo:
        current = todo.pop()
        key = current.relative_to(REPO_ROOT).as_posix()
        if key in seen:
            continue
        seen[key] = current
        for name in _imported_examples(current) - BOOKKEEPING:
            module = _module_path(name)
            if module is not None and module.name != "__init__.py":  # packages hold no measuring code
                todo.append(module)
    return [seen[k] for k in sorted(seen)]


def source_sha256(path: Path) -> str:
    """Hash of what the example at ``path`` measures with (:func:`source_files`), to tell a
    current record from a stale one: a change to the example, to an example module it
    imports, or to the harness stales it.

    Each file enters as its repository path and its text, line endings normalised so that
    a checkout on Windows hashes the same. A source that is not a Python module (a test's
    stand-in text) imports nothing and runs through no harness: its hash is its own text.
    """
    if path.suffix != ".py":
        return hashlib.sha256(path.read_bytes().replace(b"\r\n", b"\n")).hexdigest()
    digest = hashlib.sha256()
    for file in source_files(path):
        digest.update(file.relative_to(REPO_ROOT).as_posix().encode() + b"\0")
        digest.update(file.read_bytes().replace(b"\r\n", b"\n") + b"\0")
    return digest.hexdigest()


def slugify(text: str) -> str:
    """``'NVIDIA H100 80GB HBM3'`` -> ``'nvidia-h100-80gb-hbm3'``."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def _run(*cmd: str) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def host_cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvidia_smi(device_index: int) -> tuple[str | None, dict[str, float] | None, float | None]:
    """Driver version, clocks (MHz, read before the run: idle) and power limit (W) of one GPU; read, never set."""
    fields = "driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.limit"
    out = _run("nvidia-smi", f"--id={device_index}", f"--query-gpu={fields}", "--format=csv,noheader,nounits")
    if not out:
        return None, None, None
    parts = [p.strip() for p in out.splitlines()[0].split(",")]
    if len(parts) != 6:
        return None, None, None
    numbers: dict[str, float] = {}
    for name, value in zip(["sm", "mem", "max_sm", "max_mem", "power_limit"], parts[1:]):
        try:
            numbers[name] = float(value)
        except ValueError:
            continue
    limit = numbers.pop("power_limit", None)
    return parts[0], numbers or None, limit


#: The distributions that install the module ``triton``: PyPI's, and the builds PyTorch's own
#: wheels pin (CUDA, ROCm).
TRITON_DISTRIBUTIONS = ("triton", "pytorch-triton", "pytorch-triton-rocm")


def _triton_version() -> str | None:
    """Triton's version, read from the module where it is imported, else from its installed
    metadata: importing Triton only to read its version cost about a second of CPU per record of a
    CPU run (most of a small example's), and a CPU run need not import it at all."""
    module = sys.modules.get("triton")
    if module is not None:
        return getattr(module, "__version__", None)
    for name in TRITON_DISTRIBUTIONS:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def machine_info(device: str) -> Machine:
    import torch

    triton_version = _triton_version()

    gpu = {
        "gpu_name": None, "sm_count": None, "compute_capability": None,
        "gpu_memory_gib": None, "clocks_mhz": None, "driver": None, "power_limit_w": None,
    }
    gpu_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    nccl = None
    if device == "cuda":
        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        driver, clocks, smi_limit = _nvidia_smi(index)
        gpu = {
            "gpu_name": props.name,
            "sm_count": props.multi_processor_count,
            "compute_capability": f"{props.major}.{props.minor}",
            "gpu_memory_gib": round(props.total_memory / 2**30, 1),
            "clocks_mhz": clocks,
            "driver": driver,
            "power_limit_w": power_limit_w(index) or smi_limit,
        }
        try:
            nccl = ".".join(str(x) for x in torch.cuda.nccl.version())
        except (AttributeError, RuntimeError):
            nccl = None
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    cpu = host_cpu()
    return Machine(
        slug=slugify(gpu["gpu_name"] if device == "cuda" else f"cpu-{cpu}"),
        device=device,
        gpu_count=gpu_count,
        cuda=torch.version.cuda,
        cudnn=str(cudnn) if cudnn else None,
        nccl=nccl,
        torch=torch.__version__,
        triton=triton_version,
        python=platform.python_version(),
        host_cpu=cpu,
        host_cores=os.cpu_count() or 1,
        os=f"{platform.system()} {platform.release()}",
        **gpu,
    )


def git_state() -> tuple[str | None, bool | None]:
    """Commit of the checkout, and whether ``examples/`` (the code that measures) differs from it.

    Git is asked only when the code runs from the top of its own checkout: a copy of the
    tree nested inside some other repository would otherwise report that repository's
    commit, and its own files as untracked. Elsewhere ``LAB_GIT_COMMIT``/``LAB_GIT_DIRTY``
    say what was copied (machines that receive the tree without its ``.git``).
    """
    top = _run("git", "-C", str(REPO_ROOT), "rev-parse", "--show-toplevel")
    if top and Path(top).resolve() == REPO_ROOT.resolve():
        commit = _run("git", "-C", str(REPO_ROOT), "rev-parse", "HEAD")
        status = _run("git", "-C", str(REPO_ROOT), "status", "--porcelain", "--", "examples")
        return commit, bool(status)
    env_commit = os.environ.get("LAB_GIT_COMMIT") or None
    env_dirty = os.environ.get("LAB_GIT_DIRTY")
    return env_commit, (env_dirty == "1") if env_dirty in ("0", "1") else None


def boot_id() -> str | None:
    """The kernel's id of this boot: two runs with different ids ran on separately started machines."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


_STARTED = datetime.now(timezone.utc)


def run_id() -> str:
    """One id per process, shared by every topic it measures: ``LAB_RUN_ID`` or time, boot and pid.

    ``20261122T224500Z-1a2b3c4d-4242``: sortable by date, distinct across machines
    (boot id) and across processes of one machine (pid).
    """
    given = os.environ.get("LAB_RUN_ID", "").strip()
    if given:
        return given
    boot = (boot_id() or "noboot").replace("-", "")[:8]
    return f"{_STARTED.strftime('%Y%m%dT%H%M%SZ')}-{boot}-{os.getpid()}"


def run_info(*, quick: bool, command: str) -> Run:
    commit, dirty = git_state()
    return Run(
        id=run_id(),
        boot_id=boot_id(),
        date=datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
        commit=commit,
        dirty=dirty,
        command=command,
        quick=quick,
    )
