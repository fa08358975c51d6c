"""What connects the nodes of a gang: the inter-node fabric of an instance type.

NVLink/NVSwitch (``Offering.nvlink``) is inside a node; this is between nodes,
which is what bounds a multi-node all-reduce:

- ``efa``: AWS Elastic Fabric Adapter (OS-bypass, GPUDirect RDMA on p4d/p5):
  from ``DescribeInstanceTypes`` ``NetworkInfo.EfaSupported`` when the provider
  reads the API, else from the table below;
- ``gpudirect-tcpx``: GCP A3 (``a3-highgpu-8g``: GPUDirect-TCPX, ``a3-megagpu-8g``:
  GPUDirect-TCPXO), several NICs bypassing the host for GPU traffic;
- ``tcp``: ordinary VPC networking, everything else.

A job asks for one with ``resources.interconnect`` (``efa``...); an offering
without it is rejected with the reason shown by ``explain``. ``tcp`` asks for
nothing (every type has it).
"""

from __future__ import annotations

import enum


class Interconnect(enum.StrEnum):
    TCP = "tcp"
    GPUDIRECT_TCPX = "gpudirect-tcpx"
    EFA = "efa"


# AWS GPU types with EFA (AWS "Supported instance types" for EFA), for the catalog;
# the AWS provider reads the live answer from DescribeInstanceTypes.
_EFA_TYPES = frozenset({"p3dn.24xlarge", "p4d.24xlarge", "p4de.24xlarge", "g4dn.8xlarge", "g4dn.12xlarge",
                        "g4dn.16xlarge", "g4dn.metal", "g5.8xlarge", "g5.12xlarge", "g5.16xlarge",
                        "g5.24xlarge", "g5.48xlarge", "g6.8xlarge", "g6.12xlarge", "g6.16xlarge",
                        "g6.24xlarge", "g6.48xlarge", "g6e.8xlarge", "g6e.12xlarge", "g6e.16xlarge",
                        "g6e.24xlarge", "g6e.48xlarge"})  # fmt: skip
_EFA_PREFIXES = ("p5", "p6")
_TCPX_PREFIXES = ("a3-highgpu-8g", "a3-megagpu-8g", "a3-ultragpu-8g")


def interconnect_of(instance_type: str) -> Interconnect:
    """The inter-node fabric of a catalog instance type (see the module docstring)."""
    if instance_type in _EFA_TYPES or instance_type.startswith(_EFA_PREFIXES):
        return Interconnect.EFA
    if instance_type.startswith(_TCPX_PREFIXES):
        return Interconnect.GPUDIRECT_TCPX
    return Interconnect.TCP
