"""The book's measuring harness: timers, provenance, records and the runner.

Modules: :mod:`~examples.lab.timing` (timers), :mod:`~examples.lab.stats`
(median and spread), :mod:`~examples.lab.provenance` (machine, software, commit),
:mod:`~examples.lab.records` (the JSON schema), :mod:`~examples.lab.harness`
(what an example measures through), :mod:`~examples.lab.cli` (shared flags) and
``python -m examples.lab`` (the runner).
"""
