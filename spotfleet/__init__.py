"""spotfleet: a cost-aware autoscaler for GPU spot fleets.

Start with ARCHITECTURE.md for the data path and where each piece lives.
"""

__version__ = "0.1.0"
