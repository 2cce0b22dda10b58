"""Chapter 3: the BLAS name decoder over the whole reference BLAS, and the
traffic model behind the roofline."""
from __future__ import annotations

import json

import pytest

from examples.blas.levels import traffic
from examples.blas.naming import MATRICES, REFERENCE, UnknownRoutine, decode

# Reference-LAPACK BLAS/SRC/Makefile, the groups as the makefile names them.
MAKEFILE = {
    ("s", 1): "isamax sasum saxpy scopy sdot snrm2 srot srotg sscal sswap sdsdot srotmg srotm",
    ("c", 1): "scabs1 scasum scnrm2 icamax caxpy ccopy cdotc cdotu csscal crotg cscal cswap csrot",
    ("d", 1): "idamax dasum daxpy dcopy ddot dnrm2 drot drotg dscal dsdot dswap drotmg drotm",
    ("z", 1): "dcabs1 dzasum dznrm2 izamax zaxpy zcopy zdotc zdotu zdscal zrotg zscal zswap zdrot",
    ("s", 2): "sgemv sgbmv ssymv ssbmv sspmv strmv stbmv stpmv strsv stbsv stpsv sger ssyr sspr ssyr2 sspr2",
    ("c", 2): "cgemv cgbmv chemv chbmv chpmv ctrmv ctbmv ctpmv ctrsv ctbsv ctpsv cgerc cgeru cher chpr cher2 chpr2",
    ("d", 2): "dgemv dgbmv dsymv dsbmv dspmv dtrmv dtbmv dtpmv dtrsv dtbsv dtpsv dger dsyr dspr dsyr2 dspr2",
    ("z", 2): "zgemv zgbmv zhemv zhbmv zhpmv ztrmv ztbmv ztpmv ztrsv ztbsv ztpsv zgerc zgeru zher zhpr zher2 zhpr2",
    ("s", 3): "sgemm ssymm ssyrk ssyr2k strmm strsm",
    ("c", 3): "cgemm csymm csyrk csyr2k ctrmm ctrsm chemm cherk cher2k",
    ("d", 3): "dgemm dsymm dsyrk dsyr2k dtrmm dtrsm",
    ("z", 3): "zgemm zsymm zsyrk zsyr2k ztrmm ztrsm zhemm zherk zher2k",
}
# The makefile files dsdot with double precision (its result); its vectors are
# float32, and the precision of a routine is the type of its vectors.
VECTOR_TYPE = {"dsdot": "s"}
CASES = [(name, VECTOR_TYPE.get(name, p), level) for (p, level), names in MAKEFILE.items() for name in names.split()]


def test_reference_set_is_the_makefile_plus_gemmtr():
    listed = {name for name, _, _ in CASES}
    assert len(listed) == 148
    assert REFERENCE == listed | {p + "gemmtr" for p in "sdcz"}


@pytest.mark.parametrize("name,precision,level", CASES, ids=[c[0] for c in CASES])
def test_every_reference_routine(name, precision, level):
    r = decode(name)
    assert (r.name, r.precision, r.level) == (name, precision, level)
    if level == 1:
        assert r.matrix is None
        assert name.endswith(r.operation)
    else:
        assert r.matrix in MATRICES
        assert name == r.precision + r.matrix + r.operation


@pytest.mark.parametrize("name,precision,operation,result", [
    ("isamax", "s", "amax", "i"), ("izamax", "z", "amax", "i"),
    ("scnrm2", "c", "nrm2", "s"), ("dznrm2", "z", "nrm2", "d"),
    ("scasum", "c", "asum", "s"), ("dzasum", "z", "asum", "d"),
    ("csscal", "c", "scal", "c"), ("zdscal", "z", "scal", "z"),
    ("csrot", "c", "rot", "c"), ("zdrot", "z", "rot", "z"),
    ("scabs1", "c", "abs1", "s"), ("dcabs1", "z", "abs1", "d"),
    ("sdsdot", "s", "dot", "s"), ("dsdot", "s", "dot", "d"),
    ("cdotc", "c", "dotc", "c"), ("zrotg", "z", "rotg", "z"),
])
def test_mixed_prefix_names(name, precision, operation, result):
    r = decode(name)
    assert (r.precision, r.operation, r.result, r.level, r.matrix) == (precision, operation, result, 1, None)


@pytest.mark.parametrize("name,matrix,operation,level", [
    ("dgemm", "ge", "mm", 3), ("zher2k", "he", "r2k", 3), ("ctbsv", "tb", "sv", 2),
    ("sspr2", "sp", "r2", 2), ("zgeru", "ge", "ru", 2), ("cgerc", "ge", "rc", 2),
    ("dger", "ge", "r", 2), ("strsm", "tr", "sm", 3), ("chbmv", "hb", "mv", 2),
    ("dgemmtr", "ge", "mmtr", 3), ("DGEMM", "ge", "mm", 3),
])
def test_level_2_and_3(name, matrix, operation, level):
    r = decode(name)
    assert (r.matrix, r.operation, r.level) == (matrix, operation, level)


@pytest.mark.parametrize("name", ["sgemx", "dhemm", "zsymv", "ssyrk2", "caxpby", "", "xerbla", "lsame", "shemv"])
def test_unknown_names_are_rejected(name):
    with pytest.raises(UnknownRoutine):
        decode(name)


def test_cli_json(cli):
    proc = cli.run("-m", "examples.blas.naming", "--json", "zher2k", "scnrm2", "csscal")
    assert proc.returncode == 0, cli.explain(proc)
    objects = json.loads(proc.stdout)
    assert [o["name"] for o in objects] == ["zher2k", "scnrm2", "csscal"]
    assert {k: objects[0][k] for k in ("level", "precision", "matrix", "operation")} == {
        "level": 3, "precision": "z", "matrix": "he", "operation": "r2k"}
    assert objects[1]["matrix"] is None and objects[1]["precision"] == "c" and objects[1]["operation"] == "nrm2"
    assert objects[2]["precision"] == "c" and objects[2]["operation"] == "scal"


def test_cli_unknown_name_exits_2(cli):
    proc = cli.run("-m", "examples.blas.naming", "dgemm", "sgemx")
    line = cli.one_line_error(proc, status=2)
    assert "sgemx" in line
    assert proc.stdout == ""


def test_traffic_model():
    assert traffic("axpy", 10, 4) == (200.0, 1200.0)
    assert traffic("gemv", 10, 2) == (200.0, 240.0)
    flops, nbytes = traffic("gemm", 1024, 2)
    assert flops / nbytes == pytest.approx(1024 / 3)
    with pytest.raises(ValueError):
        traffic("gemmm", 4, 4)


def test_levels_record_has_the_pages_figures(cli, tmp_path):
    """The quick CPU record of blas.levels holds every figure docs/blas.md
    quotes: per level and size the kernel-duration ``time`` and the rates
    computed from it, the host-inclusive ``one_call`` beside it (GEMM only
    up to 4096), and AXPY's and GEMV's paired fraction of the copy; the
    rate is the one of ``time``, not of ``one_call``."""
    _, record = cli.quick_record("blas.levels", tmp_path, timeout=300)  # not in test_runs_on_cpu
    (roof,) = record.rows(level="copy", part="roof")
    assert {"time", "bandwidth"} <= set(roof.metrics)
    for level in ("axpy", "gemv", "gemm"):
        rows = record.rows(level=level, part="levels")
        assert sorted(r.case["n"] for r in rows) == [256, 512]
        for row in rows:
            m = row.metrics
            flops, _ = traffic(level, row.case["n"], itemsize=4)
            assert m["rate"].median == pytest.approx(flops / (m["time"].median / 1e6) / 1e12)
            assert "interleaved rounds" in m["time"].method
            assert "one_call" in m and m["one_call"].method != m["time"].method
            assert m["one_call_vs_kernel"].median == pytest.approx(
                m["one_call"].median / m["time"].median)
            assert ("fraction_of_copy" in m) == (level != "gemm")


def test_workspace_worker_errors_surface_as_one_line():
    """A worker that fails says so in the parent in one line that names its setting, and
    every worker ends, whether it failed or not (blas.workspace's CPU path, seconds)."""
    from examples.blas.workspace import Workers, WorkerFailed

    settings = {"fine": {}, "broken": {"CUBLASLT_WORKSPACE_SIZE": "0"}}
    with pytest.raises(WorkerFailed) as raised:
        with Workers(settings) as workers:
            for name in settings:
                workers.send(name, {"op": "setup", "device": "cpu", "shapes": [[[8, 8, 8], 1]]})
            assert "checks" in workers.receive("fine", 120) and "checks" in workers.receive("broken", 120)
            workers.ask("fine", {"op": "run", "case": "torch.mm (cuBLAS), 8x8x8"})
            workers.ask("broken", {"op": "run", "case": "no such case"})
    message = str(raised.value)
    assert "\n" not in message and message.startswith("workspace worker 'broken': KeyError")
    assert all(p.poll() is not None for p in workers.processes.values())
