"""Trace-driven simulation: replay real spot availability and prices against the
real controller step, and compute the omniscient optimum to measure it against.

- ``traces``: load and validate per-zone trace files onto one time grid.
- ``optimal``: the omniscient optimum for one deadline job (dynamic programming).
- ``engine``: the discrete-event loop that drives ``plan()`` against ``SimProvider``.

See docs/simulator.md for the semantics.
"""
