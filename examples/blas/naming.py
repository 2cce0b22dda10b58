"""Decode reference BLAS routine names: precision, matrix type, operation.

    python -m examples.blas.naming dgemm zherk isamax scnrm2 csscal
    python -m examples.blas.naming --json sgemv ctbsv

A name is ``<precision><matrix><operation>`` for Levels 2 and 3 (``d`` ``ge``
``mm``) and ``<precision><operation>`` for Level 1 (``d`` ``axpy``). A few
Level 1 names carry a second type letter: the type of the result (``isamax``
returns an index, ``scnrm2`` a real norm of a complex vector) or of a real
scalar (``csscal`` scales a complex vector by a real number). ``precision``
is always the type of the vectors and matrices the routine works on.

>>> d = decode("scnrm2")
>>> d.precision, d.matrix, d.operation, d.result
('c', None, 'nrm2', 's')
>>> decode("ZHER2K").level
3
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass

from examples.lab.cli import ArgumentParser, fail

EXAMPLE_ARGV = ["dgemm", "zherk", "isamax", "scnrm2", "csscal", "stbsv"]

# --8<-- [start:tables]
PRECISIONS = {
    "s": "single-precision real (float32)",
    "d": "double-precision real (float64)",
    "c": "single-precision complex (complex64)",
    "z": "double-precision complex (complex128)",
}
MATRICES = {
    "ge": "general",
    "gb": "general band",
    "sy": "symmetric",
    "sb": "symmetric band",
    "sp": "symmetric packed",
    "he": "Hermitian",
    "hb": "Hermitian band",
    "hp": "Hermitian packed",
    "tr": "triangular",
    "tb": "triangular band",
    "tp": "triangular packed",
}
#: A routine's matrix type, by the family its formula depends on.
FAMILY = {"ge": "ge", "gb": "ge", "sy": "sy", "sb": "sy", "sp": "sy",
          "he": "he", "hb": "he", "hp": "he", "tr": "tr", "tb": "tr", "tp": "tr"}
#: operation -> (level, what it is, {family: formula}). The formula is the one at the top of
#: each routine's Fortran file in the reference (Reference-LAPACK BLAS/SRC/*.f): the same
#: letters compute something narrower on a symmetric, Hermitian or triangular matrix.
OPERATIONS = {
    # Level 2: one matrix, vectors; O(n^2) data, O(n^2) flops
    "mv": (2, "matrix-vector product", {
        "ge": "y = alpha*op(A)*x + beta*y", "sy": "y = alpha*A*x + beta*y",
        "he": "y = alpha*A*x + beta*y", "tr": "x = op(A)*x (no alpha, no beta)"}),
    "sv": (2, "triangular solve for one vector", {"tr": "x = inv(op(A))*b, b overwritten"}),
    "r": (2, "rank-1 update", {
        "ge": "A = alpha*x*y^T + A", "sy": "A = alpha*x*x^T + A (one vector)",
        "he": "A = alpha*x*x^H + A (one vector, alpha real)"}),
    "ru": (2, "rank-1 update, unconjugated", {"ge": "A = alpha*x*y^T + A"}),
    "rc": (2, "rank-1 update, conjugated", {"ge": "A = alpha*x*y^H + A"}),
    "r2": (2, "rank-2 update", {
        "sy": "A = alpha*x*y^T + alpha*y*x^T + A",
        "he": "A = alpha*x*y^H + conj(alpha)*y*x^H + A"}),
    # Level 3: matrices only; O(n^2) data, O(n^3) flops
    "mm": (3, "matrix-matrix product", {
        "ge": "C = alpha*op(A)*op(B) + beta*C", "sy": "C = alpha*A*B + beta*C or alpha*B*A + beta*C",
        "he": "C = alpha*A*B + beta*C or alpha*B*A + beta*C",
        "tr": "B = alpha*op(A)*B or alpha*B*op(A)"}),
    "mmtr": (3, "matrix product updating one triangle of C",
             {"ge": "C = alpha*op(A)*op(B) + beta*C, one triangle"}),
    "sm": (3, "triangular solve for many vectors",
           {"tr": "op(A)*X = alpha*B or X*op(A) = alpha*B, X over B"}),
    "rk": (3, "rank-k update", {
        "sy": "C = alpha*A*A^T + beta*C or alpha*A^T*A + beta*C",
        "he": "C = alpha*A*A^H + beta*C or alpha*A^H*A + beta*C (alpha, beta real)"}),
    "r2k": (3, "rank-2k update", {
        "sy": "C = alpha*A*B^T + alpha*B*A^T + beta*C (or with A^T, B^T first)",
        "he": "C = alpha*A*B^H + conj(alpha)*B*A^H + beta*C (or with A^H, B^H first; beta real)"}),
}
LEVEL1 = {  # Level 1: vectors only; O(n) data, O(n) flops
    "rotg": "set up a Givens plane rotation",
    "rotmg": "set up a modified Givens rotation",
    "rot": "apply a plane rotation",
    "rotm": "apply a modified Givens rotation",
    "swap": "swap x and y",
    "scal": "x = alpha*x",
    "copy": "y = x",
    "axpy": "y = alpha*x + y",
    "dot": "dot product x^T y",
    "dotu": "dot product x^T y (unconjugated)",
    "dotc": "dot product x^H y (conjugated)",
    "nrm2": "Euclidean norm ||x||_2",
    "asum": "sum of |Re x_i| + |Im x_i|",
    "amax": "index of the first element of largest |x_i|"
    " (|Re| + |Im| for complex)",
    "abs1": "|Re z| + |Im z| of one complex number",
}
# Level 1 names with a second type letter: name -> (precision, result, note)
MIXED = {
    "sdsdot": ("s", "s", "float32 inputs, accumulated in float64"),
    "dsdot": ("s", "d", "float32 inputs, float64 accumulation and result"),
    "scnrm2": ("c", "s", "real norm of a complex64 vector"),
    "dznrm2": ("z", "d", "real norm of a complex128 vector"),
    "scasum": ("c", "s", "real sum of a complex64 vector"),
    "dzasum": ("z", "d", "real sum of a complex128 vector"),
    "scabs1": ("c", "s", "real result for one complex64 number"),
    "dcabs1": ("z", "d", "real result for one complex128 number"),
    "csscal": ("c", "c", "complex64 vector, real float32 scalar"),
    "zdscal": ("z", "z", "complex128 vector, real float64 scalar"),
    "csrot": ("c", "c", "complex64 vectors, real rotation"),
    "zdrot": ("z", "z", "complex128 vectors, real rotation"),
}
# --8<-- [end:tables]


def _names(prefixes: str, stems: str) -> list[str]:
    return [p + s for p in prefixes for s in stems.split()]


#: Every routine of the reference BLAS, Levels 1 to 3 (Reference-LAPACK
#: BLAS/SRC/Makefile: SBLAS1..ZBLAS3), plus xGEMMTR (BLAS/SRC/?gemmtr.f).
REFERENCE = frozenset(
    _names("sd", "rotg rotmg rot rotm swap scal copy axpy dot nrm2 asum")
    + ["isamax", "idamax", "icamax", "izamax"]
    + _names("cz", "rotg swap scal copy axpy dotu dotc")
    + list(MIXED)
    + _names("sd", "gemv gbmv symv sbmv spmv trmv tbmv tpmv trsv tbsv tpsv")
    + _names("sd", "ger syr spr syr2 spr2")
    + _names("cz", "gemv gbmv hemv hbmv hpmv trmv tbmv tpmv trsv tbsv tpsv")
    + _names("cz", "gerc geru her hpr her2 hpr2")
    + _names("sdcz", "gemm symm syrk syr2k trmm trsm gemmtr")
    + _names("cz", "hemm herk her2k")
)


@dataclass(frozen=True)
class Routine:
    name: str
    level: int
    precision: str  # type of the vector and matrix operands: s, d, c, z
    matrix: str | None  # two-letter matrix type; None at Level 1
    operation: str
    result: str  # type of the result: the precision, another letter, or i
    meaning: str


class UnknownRoutine(ValueError):
    pass


# --8<-- [start:decode]
def decode(name: str) -> Routine:
    """Split a reference BLAS name into precision, matrix and operation."""
    key = name.strip().lower()
    if key not in REFERENCE:
        raise UnknownRoutine(name)
    if key in MIXED:  # a second type letter: result or real scalar
        precision, result, note = MIXED[key]
        operation = next(op for op in sorted(LEVEL1, key=len, reverse=True)
                         if key.endswith(op))
        meaning = f"{LEVEL1[operation]}; {note}"
        return Routine(key, 1, precision, None, operation, result, meaning)
    if key[0] == "i":  # i<p>amax: the result is an index
        precision, operation = key[1], key[2:]
        return Routine(key, 1, precision, None, operation, "i",
                       LEVEL1[operation])
    precision, rest = key[0], key[1:]
    if rest in LEVEL1:
        return Routine(key, 1, precision, None, rest, precision,
                       LEVEL1[rest])
    matrix, operation = rest[:2], rest[2:]
    level, what, formulas = OPERATIONS[operation]
    meaning = f"{MATRICES[matrix]} matrix: {what}, {formulas[FAMILY[matrix]]}"
    return Routine(key, level, precision, matrix, operation, precision,
                   meaning)
# --8<-- [end:decode]


def describe(r: Routine) -> str:
    parts = [f"{r.name}: Level {r.level}", PRECISIONS[r.precision]]
    if r.matrix:
        parts.append(f"{r.matrix} = {MATRICES[r.matrix]}")
    parts.append(f"{r.operation} = {r.meaning}")
    if r.result == "i":
        parts.append("returns an index")
    elif r.result != r.precision:
        parts.append(f"result type {r.result}")
    return "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m examples.blas.naming",
        description=__doc__.strip().splitlines()[0],
    )
    parser.add_argument("names", nargs="+", metavar="NAME",
                        help="BLAS routine names, e.g. dgemm isamax zher2k")
    # A plain flag, not --json [PATH]: "--json dgemm" must not name a file.
    parser.add_argument("--json", action="store_true",
                        help="print one JSON list with an object per name")
    args = parser.parse_args(argv)
    decoded = []
    for name in args.names:
        try:
            decoded.append(decode(name))
        except UnknownRoutine:
            fail(f"{parser.prog}: error: {name!r} is not a routine of the "
                 "reference BLAS (Levels 1-3)")
    if args.json:
        fields = ("name", "level", "precision", "matrix", "operation",
                  "result", "meaning")
        objects = [{k: asdict(r)[k] for k in fields} for r in decoded]
        print(json.dumps(objects))
        return 0
    for r in decoded:
        print(describe(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
