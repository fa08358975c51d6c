"""The cost ledger: every paid instance-second attributed to a job or to idle.

``attribution`` is the pure core (segments + attempts → ledger lines, exact to
the micro-dollar); ``load`` reads its inputs from the store; ``report`` rolls
lines up for humans and pipelines; ``focus`` writes FinOps FOCUS rows; ``plot``
draws daily spend; ``usage`` is the controller-side recorder of job progress and
GPU telemetry the ledger uses for restart overhead and redone work.
"""
