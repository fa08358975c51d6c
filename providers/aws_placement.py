"""Gang placement on EC2: cluster placement groups and EFA network interfaces.

A gang (a multi-node job) is launched one instance per ``LaunchRequest``, all
naming the same ``placement_group`` (the planner's ``pg-<job>-<attempt>``).
This module is what makes that name real:

- ``PlacementGroups.ensure`` creates the cluster placement group the first time
  a gang member launches (``CreatePlacementGroup`` with the ownership tags) and
  reuses it after that, including one a restarted controller created before
  (``InvalidPlacementGroup.Duplicate`` → re-read its tags; a group without this
  cluster's tag is refused, never borrowed).
- ``PlacementGroups.collect`` deletes this cluster's groups that no live
  instance uses any more (instances carry ``spotfleet:placement-group``). A
  group younger than ``GROUP_GRACE`` is kept: its gang may be between
  ``CreatePlacementGroup`` and ``CreateFleet``. A group still holding
  shutting-down instances answers ``InvalidPlacementGroup.InUse`` and is
  retried on the next collection.
- ``InstanceNetworks`` reads ``DescribeInstanceTypes`` ``NetworkInfo`` to tell
  EFA-capable types (``EfaSupported``, ``EfaInfo.MaximumEfaInterfaces``) and
  ``efa_interfaces`` builds the launch template's ``NetworkInterfaces``: one EFA
  interface per network card, all in one subnet (EFA traffic does not cross
  subnets), so non-EFA types get no interfaces at all.

Why a cluster group and one pool per gang: a cluster placement group lives in
one zone, and a gang split across types or zones is not the gang the job asked
for, so the provider launches a gang member in its primary offering only; a
capacity error there is an ``InsufficientCapacity`` for that pool, the planner
requeues the whole gang (next attempt, new group) somewhere else.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from spotfleet.clock import Clock
from spotfleet.errors import NotOwned, PermanentError
from spotfleet.providers.aws_clients import AwsClients
from spotfleet.providers.aws_errors import AWS_ERRORS, ClientError, error_code, translate
from spotfleet.providers.base import TAG_CLUSTER
from spotfleet.providers.gang_placement import GROUP_GRACE, CollectionPacer

log = logging.getLogger(__name__)

TAG_CREATED_AT = "spotfleet:created-at"
GROUP_STRATEGY = "cluster"


def _tags(item: Mapping[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in item.get("Tags") or []}


@dataclass(frozen=True, slots=True)
class NetworkInfo:
    """What ``DescribeInstanceTypes`` says about one type's network."""

    efa_supported: bool
    max_efa_interfaces: int
    network_cards: int

    @property
    def efa_interfaces(self) -> int:
        """EFA interfaces to request: one per network card, at most the EFA maximum."""
        if not self.efa_supported:
            return 0
        return max(1, min(self.max_efa_interfaces or 1, self.network_cards or 1))


NO_EFA = NetworkInfo(efa_supported=False, max_efa_interfaces=0, network_cards=1)


def network_info(item: Mapping[str, Any]) -> NetworkInfo:
    """One ``DescribeInstanceTypes`` item → ``NetworkInfo`` (missing fields: no EFA)."""
    net = item.get("NetworkInfo") or {}
    return NetworkInfo(
        efa_supported=bool(net.get("EfaSupported")),
        max_efa_interfaces=int((net.get("EfaInfo") or {}).get("MaximumEfaInterfaces") or 0),
        network_cards=int(net.get("MaximumNetworkCards") or 1),
    )


def efa_interfaces(count: int, *, subnet_id: str, security_groups: Iterable[str]) -> list[dict[str, Any]]:
    """Launch template ``NetworkInterfaces``: ``count`` EFA interfaces in one subnet.

    Card 0 carries the primary interface (device 0); every other card gets its
    EFA at device 1, as AWS documents for multi-card types (p4d, p5).
    """
    groups = list(security_groups)
    result: list[dict[str, Any]] = []
    for card in range(count):
        nic: dict[str, Any] = {
            "NetworkCardIndex": card,
            "DeviceIndex": 0 if card == 0 else 1,
            "InterfaceType": "efa",
            "SubnetId": subnet_id,
            "DeleteOnTermination": True,
        }
        if groups:
            nic["Groups"] = groups
        result.append(nic)
    return result


class InstanceNetworks:
    """EFA facts per (region, instance type), read once from ``DescribeInstanceTypes``."""

    def __init__(self, clients: AwsClients) -> None:
        self._clients = clients
        self._lock = threading.Lock()
        self._known: dict[tuple[str, str], NetworkInfo] = {}

    def info(self, region: str, instance_type: str) -> NetworkInfo:
        with self._lock:
            found = self._known.get((region, instance_type))
        if found is not None:
            return found
        try:
            response = self._clients.ec2(region).describe_instance_types(InstanceTypes=[instance_type])
        except AWS_ERRORS as err:
            raise translate(err, operation="DescribeInstanceTypes") from err
        items = response.get("InstanceTypes") or []
        found = network_info(items[0]) if items else NO_EFA
        with self._lock:
            self._known[(region, instance_type)] = found
        return found

    def default_subnet(self, region: str, zone: str) -> str:
        """The zone's default subnet (EFA needs a subnet when none is configured)."""
        try:
            response = self._clients.ec2(region).describe_subnets(
                Filters=[
                    {"Name": "availability-zone", "Values": [zone]},
                    {"Name": "default-for-az", "Values": ["true"]},
                ]
            )
        except AWS_ERRORS as err:
            raise translate(err, operation="DescribeSubnets") from err
        subnets = sorted(str(s["SubnetId"]) for s in response.get("Subnets") or [])
        if not subnets:
            raise PermanentError(f"aws: no subnet configured for {zone} and no default subnet there (EFA needs one)")
        return subnets[0]


class PlacementGroups:
    """This cluster's cluster placement groups: created per gang, deleted when empty."""

    def __init__(self, *, clients: AwsClients, cluster: str, clock: Clock, extra_tags: Mapping[str, str]) -> None:
        self._clients = clients
        self._cluster = cluster
        self._clock = clock
        self._extra_tags = dict(extra_tags)
        self._lock = threading.Lock()
        self._ready: set[tuple[str, str]] = set()  # (region, name) known to exist and be ours
        self._pacer = CollectionPacer()

    def ensure(self, region: str, name: str) -> None:
        """Create the group if it does not exist yet; refuse one another owner made."""
        with self._lock:
            if (region, name) in self._ready:
                return
        ec2 = self._clients.ec2(region)
        tags = {**self._extra_tags, TAG_CLUSTER: self._cluster, TAG_CREATED_AT: self._clock.now().isoformat()}
        try:
            ec2.create_placement_group(
                GroupName=name,
                Strategy=GROUP_STRATEGY,
                TagSpecifications=[
                    {
                        "ResourceType": "placement-group",
                        "Tags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())],
                    }
                ],
            )
            log.info("created placement group %s in %s", name, region)
        except ClientError as err:
            if error_code(err) != "InvalidPlacementGroup.Duplicate":
                raise translate(err, operation="CreatePlacementGroup") from err
            group = self._describe(region, names=[name])
            if not group or _tags(group[0]).get(TAG_CLUSTER) != self._cluster:
                raise NotOwned(f"placement group {name} in {region}") from err
            if group[0].get("Strategy") != GROUP_STRATEGY:
                raise PermanentError(f"aws: placement group {name} is {group[0].get('Strategy')}, not cluster") from err
        except AWS_ERRORS as err:
            raise translate(err, operation="CreatePlacementGroup") from err
        with self._lock:
            self._ready.add((region, name))

    def _describe(self, region: str, *, names: list[str] | None = None) -> list[dict[str, Any]]:
        kwargs: dict[str, Any] = (
            {"GroupNames": names} if names else {"Filters": [{"Name": f"tag:{TAG_CLUSTER}", "Values": [self._cluster]}]}
        )
        try:
            return list(self._clients.ec2(region).describe_placement_groups(**kwargs).get("PlacementGroups") or [])
        except AWS_ERRORS as err:
            raise translate(err, operation="DescribePlacementGroups") from err

    def collect(self, region: str, in_use: set[str], *, force: bool = False) -> list[str]:
        """Delete this cluster's groups no live instance uses (at most once a minute per region).

        Returns the names deleted. Never fails the caller: a listing that
        collects garbage on the side must still list.
        """
        now = self._clock.now()
        if not self._pacer.due(region, now, force=force):
            return []
        deleted: list[str] = []
        try:
            groups = self._describe(region)
        except Exception as err:  # housekeeping only
            log.warning("could not list placement groups in %s: %s", region, err)
            return deleted
        for group in groups:
            name = str(group.get("GroupName", ""))
            tags = _tags(group)
            if not name or name in in_use or tags.get(TAG_CLUSTER) != self._cluster:
                continue
            try:
                created = datetime.fromisoformat(tags.get(TAG_CREATED_AT, ""))
            except ValueError:
                created = None
            if created is not None and now - created < GROUP_GRACE:
                continue
            try:
                self._clients.ec2(region).delete_placement_group(GroupName=name)
            except AWS_ERRORS as err:  # InUse (instances still shutting down): next time
                log.info("placement group %s in %s not deleted yet: %s", name, region, err)
                continue
            log.info("deleted empty placement group %s in %s", name, region)
            deleted.append(name)
            with self._lock:
                self._ready.discard((region, name))
        return deleted
