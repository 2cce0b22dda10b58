"""Which xdist worker runs which tests, under ``make test`` (``pytest -n 2 --dist loadgroup``).

pytest-xdist 3.8's ``loadgroup`` learns a test's group from a suffix it writes into the test's
node id on the worker. Under pytest 9.2 that write no longer takes (node ids are kept in another
attribute): every test was scheduled alone, as if nothing were grouped
(https://github.com/pytest-dev/pytest-xdist/issues/1386), so a module's costly fixture (a strict
build of the book, a Chromium with its pages open) was made again on each worker that ran one of
its tests, and the longest work could start last while the other worker idled.

This scheduler (``tests/conftest.py`` installs it for ``--dist loadgroup``) reads nothing from a
worker but the node ids, and needs no suffix. Its work units are:

* a test module, whole: its module-scoped fixtures are made once, on one worker;
* each test alone in a module of ``SPREAD``, whose tests share no costly fixture;
* a page of ``docs/`` or a file of ``examples/``, whole and in order (Sybil: the examples of a
  page share one namespace);
* a group named by an ``@group`` suffix, should xdist write one again (as ``loadgroup`` does).

Units start longest first, by ``FIRST`` (measured on two cores; see there); then the other modules, in
collection order; then the tests of ``SPREAD``, the finest units, which even out the end.
"""
from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

#: Modules whose tests share no module- or session-scoped fixture worth making once: their tests
#: are scheduled one by one (each example's run, each collective's processes).
SPREAD = ("tests/test_examples.py", "tests/test_collectives.py")

#: The longest work units, longest first: a node id or a module, a prefix of the unit's first test.
#: A unit missing here only starts later; a name here that no longer exists changes nothing. Under
#: ``make test`` the book's build runs beside the first minute or two of the suite, so the first
#: units need no built site until late (reader records, notebooks) or at all (capstone).
FIRST = (
    "tests/test_reader_records.py",             # a strict build with readers' records (and a claim broken); the book's at the end
    "tests/test_notebooks.py",                  # every notebook in a Jupyter kernel; the site at the end
    "tests/test_capstone.py",                   # the fused kernels in Triton's interpreter
    "tests/test_browser.py",                    # Chromium, every page in two palettes
    "tests/test_print_edition.py",              # Chromium prints the whole book to PDF (about a minute)
    "tests/test_calculators.py",                # Chromium on five pages, and each widget's Python twin
    "tests/test_examples.py::test_runs_on_cpu[collectives.ring_allreduce]",
    "tests/test_lab.py",
    "tests/test_ddp_probe.py",
    "tests/test_compile.py",
    "tests/test_fp8_training.py",
    "tests/test_collectives.py::test_ddp_overlap",
    "tests/test_collectives.py::test_ddp_levers",
)


class ModuleScheduling(LoadScopeScheduling):
    """``LoadScopeScheduling`` with the units and the order above."""

    _ordered = False

    def _split_scope(self, nodeid: str) -> str:
        if nodeid.rfind("@") > nodeid.rfind("]"):  # xdist's own group suffix, if it works again
            return nodeid.rsplit("@", 1)[-1]
        module = nodeid.split("::", 1)[0]
        return nodeid if module in SPREAD else module

    def _assign_work_unit(self, node) -> None:
        if not self._ordered:  # the first assignment: the queue holds every unit
            self._ordered = True
            first_seen = {}
            for index, nodeid in enumerate(self.collection):
                first_seen.setdefault(self._split_scope(nodeid), (index, nodeid))

            def rank(scope: str) -> tuple[int, int]:
                index, nodeid = first_seen[scope]
                for position, prefix in enumerate(FIRST):
                    if nodeid.startswith(prefix):
                        return position, index
                spread = nodeid.split("::", 1)[0] in SPREAD
                return len(FIRST) + spread, index

            units = sorted(self.workqueue.items(), key=lambda unit: rank(unit[0]))
            self.workqueue.clear()
            self.workqueue.update(units)
        super()._assign_work_unit(node)
