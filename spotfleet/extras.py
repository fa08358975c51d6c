"""Optional dependencies, installed as extras, imported lazily.

spotfleet's core is what a node agent and a local controller need (``pip
install spotfleet``): the API, the store on SQLite, the scheduler, the agent and
its NVML telemetry. Everything else is an extra:

- ``[aws]``: boto3 (the AWS provider, live AWS prices);
- ``[gcp]``: google-cloud-compute (the GCP provider);
- ``[postgres]``: psycopg (a PostgreSQL store);
- ``[sim]``: numpy (the simulator and the benchmarks);
- ``[plot]``: matplotlib (``--plot`` on ``simulate`` and ``cost report``);
- ``[all]``: every one of them.

``requires(extra, feature)`` turns the ``ModuleNotFoundError`` of a missing
extra into ``MissingExtra``: one line that says what to install. An import
error of anything else is not hidden.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from spotfleet.errors import MissingExtra

# top-level module names each extra provides
EXTRAS: dict[str, frozenset[str]] = {
    "aws": frozenset({"boto3", "botocore", "s3transfer", "jmespath"}),
    "gcp": frozenset({"google", "grpc", "proto", "googleapiclient"}),
    "postgres": frozenset({"psycopg", "psycopg_binary", "psycopg2"}),
    "sim": frozenset({"numpy"}),
    "plot": frozenset({"matplotlib", "numpy", "PIL", "kiwisolver", "contourpy"}),
}


@contextmanager
def requires(extra: str, feature: str) -> Iterator[None]:
    try:
        yield
    except ModuleNotFoundError as exc:
        top = (exc.name or "").split(".")[0]
        if top in EXTRAS[extra]:
            raise MissingExtra(extra, feature, top) from None
        raise
