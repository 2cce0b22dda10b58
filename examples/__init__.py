"""Runnable examples of *Python to Silicon*, one topic per module.

Run any of them as ``python -m examples.<chapter>.<topic> --help``; run every
benchmark on this machine with ``python -m examples.lab run --all --out DIR``.
"""
