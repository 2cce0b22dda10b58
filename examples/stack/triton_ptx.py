"""The PTX and SASS of a small Triton kernel, compiled for a GPU you need not have.

Triton compiles ahead of time for any target: ``GPUTarget("cuda", 90, 32)``
is an sm_90 (Hopper) GPU with 32-thread warps, ``("cuda", 80, 32)`` an sm_80
(Ampere) one. The kernel multiplies one 64x32 tile by one 32x64 tile with
``tl.dot``; the example prints the matrix instructions of its PTX and, through
the ``cuobjdump`` that ships inside the Triton wheel, of its SASS.

    python -m examples.stack.triton_ptx --arch 90 --show mma
"""

from __future__ import annotations

import os
import re
import sys

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # silence a notice

from examples.lab.cli import ArgumentParser, fail  # noqa: E402

EXAMPLE_ARGV = ["--arch", "90", "--show", "mma"]
ARCHS = {"80": "Ampere (A100)", "90": "Hopper (H100, H200)"}


def _compiled_not_interpreted(fn):
    """``triton.jit``, even where TRITON_INTERPRET=1 is set (the interpreter
    runs kernels on the CPU but cannot compile them for a target)."""
    import triton

    saved = os.environ.pop("TRITON_INTERPRET", None)
    try:
        return triton.jit(fn)
    finally:
        if saved is not None:
            os.environ["TRITON_INTERPRET"] = saved


# --8<-- [start:kernel]
def compile_tile_matmul(arch: int):
    """Compile a one-tile matrix product for ``sm_<arch>``; no GPU needed."""
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget

    @_compiled_not_interpreted
    def tile_mm(a, b, c, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        m, n, k = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
        x = tl.load(a + m[:, None] * BK + k[None, :])  # BM x BK fp16
        y = tl.load(b + k[:, None] * BN + n[None, :])  # BK x BN fp16
        tl.store(c + m[:, None] * BN + n[None, :], tl.dot(x, y))

    source = triton.compiler.ASTSource(
        fn=tile_mm,
        signature={"a": "*fp16", "b": "*fp16", "c": "*fp32",
                   "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"},
        constexprs={"BM": 64, "BN": 64, "BK": 32},
    )
    return triton.compile(source, target=GPUTarget("cuda", arch, 32))


# --8<-- [end:kernel]


# --8<-- [start:mma]
def mma_instructions(compiled) -> dict[str, list[str]]:
    """The distinct matrix instructions in the PTX and in the SASS."""
    ptx = compiled.asm["ptx"]
    found = {"ptx": sorted(set(re.findall(r"\b(w?gmma\.mma_async[\w.]*|"
                                          r"mma\.sync[\w.]*)", ptx)))}
    try:
        from triton.tools.disasm import get_sass

        sass = get_sass(compiled.asm["cubin"])
    except Exception as exc:  # no cuobjdump: say what is missing
        found["sass"] = [f"unavailable ({type(exc).__name__}: {exc})"]
    else:
        found["sass"] = sorted(set(re.findall(r"\b(H?GMMA[\w.]*|HMMA[\w.]*)",
                                              sass)))
    return found


# --8<-- [end:mma]


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m examples.stack.triton_ptx",
                            description=__doc__.strip().splitlines()[0])
    parser.add_argument("--arch", choices=sorted(ARCHS), default="90",
                        help="compute capability: 80 (Ampere) or 90 (Hopper)")
    parser.add_argument("--show", choices=["mma", "ptx", "sass"],
                        default="mma", help="matrix instructions, or a "
                        "listing (ptx, sass)")
    args = parser.parse_args(argv)
    try:
        compiled = compile_tile_matmul(int(args.arch))
    except ImportError as exc:
        fail(f"triton_ptx: needs Triton ({exc})", status=1)
    if args.show == "ptx":
        print(compiled.asm["ptx"])
    elif args.show == "sass":
        from triton.tools.disasm import get_sass

        print(get_sass(compiled.asm["cubin"]))
    else:
        print(f"sm_{args.arch}, {ARCHS[args.arch]}:")
        for level, names in mma_instructions(compiled).items():
            for name in names:
                print(f"  {level:4} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
