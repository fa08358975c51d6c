"""Emulated cloud metadata servers (AWS IMDSv2, GCE metadata) on loopback.

They speak the clouds' real protocols, so the node agent's notice watchers run
unchanged against them in tests, in ``spotfleet demo`` and on the local
provider's fake instances. Each server runs in a background thread, and takes
notices and faults through a Python API (``server.announce("spot", 120)``) or
an HTTP control endpoint (``POST /_spotfleet/notice``) that another process
(``spotfleet local interrupt``) can call through ``spotfleet.metadata.control``.

Run one standalone with ``python -m spotfleet.metadata --flavor aws --port 0
--instance-id i-123 --zone us-east-1a --port-file /tmp/port``.
"""

from spotfleet.errors import InvalidSpec
from spotfleet.metadata.aws import AwsImdsServer
from spotfleet.metadata.base import (
    ANNOUNCE_KINDS,
    CONTROL_PREFIX,
    MetadataServer,
    UnsupportedNotice,
)
from spotfleet.metadata.gcp import GcpMetadataServer

__all__ = [
    "ANNOUNCE_KINDS",
    "CONTROL_PREFIX",
    "AwsImdsServer",
    "GcpMetadataServer",
    "MetadataServer",
    "UnsupportedNotice",
    "server_for",
]


def server_for(flavor: str, *, instance_id: str, zone: str, host: str = "127.0.0.1", port: int = 0) -> MetadataServer:
    """A metadata server of the given flavor (``aws`` or ``gcp``), not yet started."""
    if flavor == "aws":
        return AwsImdsServer(instance_id=instance_id, zone=zone, host=host, port=port)
    if flavor == "gcp":
        return GcpMetadataServer(instance_id=instance_id, zone=zone, host=host, port=port)
    raise InvalidSpec("flavor", f"unknown metadata flavor {flavor!r}; use aws or gcp")
