"""What may not happen while a CUDA graph is captured, and the errors it gives.

During capture the GPU runs nothing: kernels are only recorded. So anything
that needs a result on the host (``.item()``, ``.cpu()``, ``print``, an output
whose size depends on the data such as ``nonzero``) or that waits for the
device (``synchronize``) cannot work, and CUDA refuses it. Each attempt runs
in a fresh process, because a failed capture can leave the CUDA context
unusable; the record keeps the exception each one raised.
"""

from __future__ import annotations

import multiprocessing
import sys

import torch

REQUIRES_CUDA = True


# --8<-- [start:attempts]
def _item(x):
    return x.sum().item()  # needs the value on the host now


def _cpu(x):
    return x.cpu()  # a device-to-host copy the host must wait for


def _print(x):
    print(x)  # formatting reads the values: a copy to the host


def _nonzero(x):
    return torch.nonzero(x > 0)  # output size depends on the data


def _synchronize(x):
    torch.cuda.synchronize()  # waits for work that is not running


ATTEMPTS = {
    "item": _item,
    "cpu": _cpu,
    "print": _print,
    "nonzero": _nonzero,
    "synchronize": _synchronize,
}
# --8<-- [end:attempts]


# --8<-- [start:attempt]
def attempt(name: str) -> dict[str, str]:
    """Capture ``ATTEMPTS[name]`` (in a fresh process); return its errors."""
    x = torch.randn(1024, device="cuda")
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            ATTEMPTS[name](x)
    except Exception as exc:  # noqa: BLE001 -- report whatever was raised
        # Leaving the block ends the capture, which fails again and hides the
        # first error behind a second one; the first is the one that explains.
        first = exc
        while first.__context__ is not None:
            first = first.__context__
        outcome = {"raised": _one_line(first)}
        if first is not exc:
            outcome["then, ending the capture"] = _one_line(exc)
        return outcome
    return {"raised": "nothing"}


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"


# --8<-- [end:attempt]


def measure(lab) -> None:
    # One fresh process per attempt (a failed capture can poison the process's
    # CUDA context), all at once: nothing here is timed, so they may overlap.
    # Each is forked from a fork server that has imported torch once, rather
    # than spawned to import it again (seconds each, five at a time); the
    # server never touches CUDA, so every attempt still starts its own
    # context, and this process's is never forked.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["__main__", "torch"])
    with context.Pool(processes=len(ATTEMPTS), maxtasksperchild=1) as pool:
        outcomes = pool.map(attempt, list(ATTEMPTS), chunksize=1)
    for name, outcome in zip(ATTEMPTS, outcomes):
        lab.note(name, outcome)


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
