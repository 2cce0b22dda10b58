"""The dispatch keys of real tensors, and what the thread adds or removes.

A tensor carries a set of dispatch keys (its backend, autograd, autocast...);
the thread carries keys to include (autocast turned on) and to exclude
(``no_grad`` does not touch keys; ``inference_mode`` does). The dispatcher
runs the highest-priority key of their union first. This example records the
key sets on this machine: CPU tensors always, CUDA tensors where there is a GPU.
"""

from __future__ import annotations

import sys

import torch


# --8<-- [start:keys]
def keys(t: torch.Tensor) -> str:
    """The tensor's own keys, highest priority first."""
    ks = str(torch._C._dispatch_keys(t)).removeprefix("DispatchKeySet(")
    return ", ".join(reversed(ks.rstrip(")").split(", ")))


def thread_keys() -> str:
    """Keys the current thread adds to every call, and keys it removes."""
    include = torch._C._dispatch_tls_local_include_set()
    exclude = torch._C._dispatch_tls_local_exclude_set()
    text = f"include {include}; exclude {exclude}"
    return text.replace("DispatchKeySet", "")


# --8<-- [end:keys]


# --8<-- [start:order]
def priority_order(names: list[str]) -> str:
    """``names`` of dispatch keys, in the order the dispatcher visits them.

    The order is the installed PyTorch's own: a key set lists its keys from
    the lowest priority to the highest, so the set of every key is the table.
    """
    full = str(torch._C._dispatch_keyset_full()).removeprefix("DispatchKeySet(")
    rank = {name: i for i, name in enumerate(full.rstrip(")").split(", "))}
    return ", ".join(sorted(names, key=lambda name: -rank[name]))


# --8<-- [end:order]

#: The keys the book's source lesson orders (Vmap is FuncTorchBatched today),
#: with the two a TorchDispatchMode and a tensor's backend add.
LESSON_KEYS = ["Functionalize", "AutogradCUDA", "AutocastCUDA", "FuncTorchBatched",
               "ADInplaceOrView", "Python", "CUDA"]


def observations(device: str) -> dict[str, str]:
    out = {}
    x = torch.randn(4, device=device)
    out[f"{device} tensor"] = keys(x)
    out[f"{device} tensor, requires_grad"] = keys(x.clone().requires_grad_())
    with torch.inference_mode():
        out[f"{device} tensor made in inference_mode"] = keys(
            torch.randn(4, device=device))
        out["thread, in inference_mode"] = thread_keys()
    out["thread, default"] = thread_keys()
    with torch.no_grad():
        out["thread, in no_grad"] = thread_keys()
    with torch.autocast(device, dtype=torch.bfloat16):
        out[f"thread, in autocast({device!r})"] = thread_keys()
    return out


def measure(lab) -> None:
    # A check that the keys matter: autocast changes the dtype of a matmul.
    x = torch.randn(8, 8, device=lab.device)
    with torch.autocast(lab.device.type, dtype=torch.bfloat16):
        y = x @ x
    lab.note("dtype of x @ x under autocast", str(y.dtype))
    lab.check("x @ x under autocast", y.float(), x.double() @ x.double(),
              tolerance=2e-2)
    lab.note("priority order of the keys, highest first", priority_order(LESSON_KEYS))
    for device in ["cpu"] + (["cuda"] if lab.cuda else []):
        for key, value in observations(device).items():
            lab.note(key if key.startswith(device) else f"{key} [{device}]",
                     value)


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
