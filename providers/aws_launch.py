"""Buying instances on EC2: launch template versions and CreateFleet requests.

One launch is two calls:

1. ``CreateLaunchTemplateVersion``: a version that carries this launch's user
   data (the node bootstrap with the instance's secret). Spotfleet's own
   template (``spotfleet-<cluster>``) gets a full version built from config
   (IMDSv2 required with hop limit 1, encrypted gp3 root volume, volume tags);
   an existing template (e.g. terraform's) gets a version copied from its
   default version with the user data replaced and IMDSv2 and volume
   encryption enforced; its default version is never changed.
   The call carries a client token derived from the request id, so a retried
   launch reuses the same version, and the fleet call below stays identical.
2. ``CreateFleet`` with ``Type=instant``: one override per acceptable (instance
   type × subnet) — or × zone when no subnet is configured — with
   ``price-capacity-optimized`` for spot and ``lowest-price`` for on-demand,
   ``ClientToken`` = the request id, and tags for the fleet and its instances.

The response is read override by override: instances that launched come back
with the offering they were bought from; each entry of ``Errors`` is mapped back
to the exact offering it names, so ``InsufficientCapacity`` names exactly the
pools that had none.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spotfleet.errors import PermanentError
from spotfleet.model.offering import Market, Offering
from spotfleet.providers.aws_clients import AwsClients
from spotfleet.providers.aws_config import AwsProviderConfig
from spotfleet.providers.aws_errors import AWS_ERRORS, ClientError, error_code, translate
from spotfleet.providers.aws_prices import Zone
from spotfleet.providers.base import TAG_CLUSTER, TAG_REQUEST_ID

log = logging.getLogger(__name__)

MANAGED_TEMPLATE_PREFIX = "spotfleet-"
PRUNE_EVERY = 50  # versions between two clean-ups of old launch template versions
MAX_CLIENT_TOKEN = 64
MARKET_CAPACITY_TYPE = {Market.SPOT: "spot", Market.ON_DEMAND: "on-demand"}
LIFECYCLE_MARKET = {"spot": Market.SPOT, "on-demand": Market.ON_DEMAND}


def client_token(request_id: str, *, purpose: str = "") -> str:
    """An EC2 client token (≤ 64 ASCII chars) for a request id, stable across retries."""
    raw = f"{purpose}{request_id}"
    if len(raw) <= MAX_CLIENT_TOKEN and raw.isascii():
        return raw
    return f"{purpose}{hashlib.sha256(request_id.encode()).hexdigest()[: MAX_CLIENT_TOKEN - len(purpose)]}"


def tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in sorted(tags.items())]


def metadata_options() -> dict[str, Any]:
    """IMDSv2 only, and not reachable from containers one hop further away."""
    return {
        "HttpTokens": "required",
        "HttpPutResponseHopLimit": 1,
        "HttpEndpoint": "enabled",
        "InstanceMetadataTags": "disabled",
    }


def managed_template_data(
    config: AwsProviderConfig,
    *,
    user_data: str,
    volume_tags: Mapping[str, str],
    network_interfaces: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The full launch template data spotfleet's own template gets for one launch."""
    if not config.ami_id:
        raise PermanentError("aws: set ami_id or launch_template_name in the provider config to launch")
    ebs: dict[str, Any] = {
        "VolumeSize": config.root_volume_gib,
        "VolumeType": "gp3",
        "Encrypted": True,
        "DeleteOnTermination": True,
    }
    if config.kms_key_id:
        ebs["KmsKeyId"] = config.kms_key_id
    data: dict[str, Any] = {
        "ImageId": config.ami_id,
        "MetadataOptions": metadata_options(),
        "BlockDeviceMappings": [{"DeviceName": config.root_device_name, "Ebs": ebs}],
        "InstanceInitiatedShutdownBehavior": "terminate",
        "UserData": base64.b64encode(user_data.encode()).decode(),
        "TagSpecifications": [{"ResourceType": "volume", "Tags": tag_list(volume_tags)}],
    }
    if network_interfaces:  # the interfaces carry the subnet and security groups
        data["NetworkInterfaces"] = [dict(n) for n in network_interfaces]
    elif config.security_group_ids:
        data["SecurityGroupIds"] = list(config.security_group_ids)
    if config.instance_profile:
        key = "Arn" if config.instance_profile.startswith("arn:") else "Name"
        data["IamInstanceProfile"] = {key: config.instance_profile}
    if config.key_name:
        data["KeyName"] = config.key_name
    return data


def derived_template_data(
    base: Mapping[str, Any], *, user_data: str, network_interfaces: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """An existing template's data with this launch's user data, IMDSv2 and encryption enforced.

    Design choice: the version is written out in full instead of with
    ``SourceVersion``: it reads the same in the console, and endpoints that do
    not merge source versions (moto) launch it too.
    """
    data = {k: v for k, v in base.items() if k != "UserData"}
    data["UserData"] = base64.b64encode(user_data.encode()).decode()
    data["MetadataOptions"] = metadata_options()
    mappings = []
    for mapping in data.get("BlockDeviceMappings") or []:
        mapping = dict(mapping)
        if "Ebs" in mapping:
            mapping["Ebs"] = {**mapping["Ebs"], "Encrypted": True}
        mappings.append(mapping)
    if mappings:
        data["BlockDeviceMappings"] = mappings
    if network_interfaces:  # EFA: the template's own interfaces/groups move onto them
        groups = list(data.pop("SecurityGroupIds", None) or [])
        data.pop("NetworkInterfaces", None)
        data.pop("SecurityGroups", None)
        data["NetworkInterfaces"] = [{**n, **({"Groups": groups} if groups and "Groups" not in n else {})}
                                     for n in network_interfaces]  # fmt: skip
    return data


@dataclass(frozen=True, slots=True)
class TemplateVersion:
    template_id: str
    version: str


class LaunchTemplates:
    """Finds or creates the launch template per region and adds one version per launch."""

    def __init__(self, config: AwsProviderConfig, *, clients: AwsClients, cluster: str) -> None:
        self._config = config
        self._clients = clients
        self._cluster = cluster
        self._lock = threading.Lock()
        self._templates: dict[str, tuple[str, int]] = {}  # region → (id, default version)
        self._base_data: dict[str, dict[str, Any]] = {}  # region → an existing template's default data

    @property
    def managed(self) -> bool:
        return self._config.launch_template_name is None

    @property
    def name(self) -> str:
        return self._config.launch_template_name or f"{MANAGED_TEMPLATE_PREFIX}{self._cluster}"

    def _template(self, region: str, ec2: Any) -> tuple[str, int]:
        with self._lock:
            found = self._templates.get(region)
            if found is not None:
                return found
            try:
                response = ec2.describe_launch_templates(LaunchTemplateNames=[self.name])
                template = response["LaunchTemplates"][0]
                found = (template["LaunchTemplateId"], int(template["DefaultVersionNumber"]))
            except ClientError as err:
                if not error_code(err).startswith("InvalidLaunchTemplateName"):
                    raise translate(err, operation="DescribeLaunchTemplates") from err
                if not self.managed:
                    raise PermanentError(f"aws: launch template {self.name!r} not found in {region}") from err
            except AWS_ERRORS as err:
                raise translate(err, operation="DescribeLaunchTemplates") from err
            if found is None:
                found = self._create(region, ec2)
            self._templates[region] = found
            return found

    def _create(self, region: str, ec2: Any) -> tuple[str, int]:
        """Spotfleet's own template; version 1 is a placeholder each launch supersedes."""
        data = managed_template_data(self._config, user_data="#!/bin/bash\n", volume_tags={TAG_CLUSTER: self._cluster})
        try:
            response = ec2.create_launch_template(
                LaunchTemplateName=self.name,
                LaunchTemplateData=data,
                ClientToken=client_token(f"{self._cluster}-{region}", purpose="lt-"),
                TagSpecifications=[{"ResourceType": "launch-template", "Tags": tag_list({TAG_CLUSTER: self._cluster})}],
            )
        except AWS_ERRORS as err:
            raise translate(err, operation="CreateLaunchTemplate") from err
        template = response["LaunchTemplate"]
        log.info("created launch template %s (%s) in %s", self.name, template["LaunchTemplateId"], region)
        return template["LaunchTemplateId"], int(template["DefaultVersionNumber"])

    def _base(self, region: str, ec2: Any, *, template_id: str, version: int) -> dict[str, Any]:
        """An existing template's default version data (read once per region)."""
        with self._lock:
            found = self._base_data.get(region)
        if found is not None:
            return found
        try:
            response = ec2.describe_launch_template_versions(LaunchTemplateId=template_id, Versions=[str(version)])
        except AWS_ERRORS as err:
            raise translate(err, operation="DescribeLaunchTemplateVersions") from err
        found = dict(response["LaunchTemplateVersions"][0]["LaunchTemplateData"])
        with self._lock:
            self._base_data[region] = found
        return found

    def version_for(
        self,
        region: str,
        *,
        request_id: str,
        user_data: str,
        volume_tags: Mapping[str, str],
        network_interfaces: Sequence[Mapping[str, Any]] = (),
    ) -> TemplateVersion:
        """A new version carrying this launch's user data (idempotent per request id)."""
        ec2 = self._clients.ec2(region)
        template_id, default_version = self._template(region, ec2)
        kwargs: dict[str, Any] = {
            "LaunchTemplateId": template_id,
            # The executor re-mints the agent token when it re-issues a request, so the
            # user data can differ between retries: same data → same version.
            "ClientToken": client_token(
                f"{request_id}-{hashlib.sha256(user_data.encode()).hexdigest()[:16]}", purpose="ltv-"
            ),
            "VersionDescription": f"spotfleet request {request_id}"[:255],
        }
        if self.managed:
            kwargs["LaunchTemplateData"] = managed_template_data(
                self._config, user_data=user_data, volume_tags=volume_tags, network_interfaces=network_interfaces
            )
        else:
            kwargs["LaunchTemplateData"] = derived_template_data(
                self._base(region, ec2, template_id=template_id, version=default_version),
                user_data=user_data,
                network_interfaces=network_interfaces,
            )
        try:
            response = ec2.create_launch_template_version(**kwargs)
        except AWS_ERRORS as err:
            raise translate(err, operation="CreateLaunchTemplateVersion") from err
        number = int(response["LaunchTemplateVersion"]["VersionNumber"])
        self._prune(ec2, template_id=template_id, latest=number, default=default_version)
        return TemplateVersion(template_id, str(number))

    def _prune(self, ec2: Any, *, template_id: str, latest: int, default: int) -> None:
        """Delete old per-launch versions now and then (a template holds at most 10,000)."""
        keep = self._config.launch_template_versions_kept
        if latest <= keep or latest % PRUNE_EVERY:
            return
        old = [str(v) for v in range(max(1, latest - keep - 2 * PRUNE_EVERY), latest - keep + 1) if v != default]
        if not old:
            return
        try:
            ec2.delete_launch_template_versions(LaunchTemplateId=template_id, Versions=old[:200])
        except AWS_ERRORS as err:  # housekeeping only: never fail a launch over it
            log.warning("could not prune launch template versions of %s: %s", template_id, err)


@dataclass(frozen=True, slots=True)
class LaunchedInstance:
    instance_id: str
    offering: Offering
    market: Market


@dataclass(frozen=True, slots=True)
class OverrideError:
    """One ``Errors`` entry of a CreateFleet response, mapped to its offering."""

    offering: Offering | None  # None when the error names no override
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class FleetOutcome:
    launched: tuple[LaunchedInstance, ...]
    errors: tuple[OverrideError, ...]


class FleetPlan:
    """The CreateFleet request for one launch, and how to read its response."""

    def __init__(
        self,
        *,
        offerings: Sequence[Offering],
        zones: Mapping[str, Zone],
        config: AwsProviderConfig,
    ) -> None:
        self.offerings = tuple(offerings)
        self.market = self.offerings[0].market
        self._config = config
        self._zones = zones
        self._subnet_zone: dict[str, str] = {}
        self._by_pool: dict[tuple[str, str, str], Offering] = {}
        for offering in self.offerings:
            self._by_pool[(offering.market.value, offering.instance_type, offering.zone)] = offering

    def overrides(self, *, placement_group: str | None, subnet_in_template: bool = False) -> list[dict[str, Any]]:
        """One override per (type × subnet), or per type only when the template's
        network interfaces name the subnet (EC2 refuses a subnet in both places)."""
        result: list[dict[str, Any]] = []
        for offering in self.offerings:
            if subnet_in_template:
                override: dict[str, Any] = {"InstanceType": offering.instance_type}
                if placement_group:
                    override["Placement"] = {"GroupName": placement_group}
                result.append(override)
                continue
            zone = self._zones[offering.zone]
            subnets = self._config.subnets_for(zone_name=zone.name, zone_id=zone.zone_id)
            targets: list[dict[str, str]] = []
            for subnet in subnets:
                self._subnet_zone[subnet] = zone.name
                targets.append({"SubnetId": subnet})
            if not targets:
                targets.append({"AvailabilityZone": zone.name})
            for target in targets:
                override = {"InstanceType": offering.instance_type, **target}
                if placement_group:
                    override["Placement"] = {"GroupName": placement_group}
                result.append(override)
        return result

    def request(
        self,
        *,
        request_id: str,
        count: int,
        template: TemplateVersion,
        tags: Mapping[str, str],
        placement_group: str | None,
        subnet_in_template: bool = False,
    ) -> dict[str, Any]:
        capacity_type = MARKET_CAPACITY_TYPE[self.market]
        target: dict[str, Any] = {"TotalTargetCapacity": count, "DefaultTargetCapacityType": capacity_type}
        if self.market is Market.SPOT:
            target["SpotTargetCapacity"] = count
        else:
            target["OnDemandTargetCapacity"] = count
        fleet_tags = {TAG_CLUSTER: tags[TAG_CLUSTER], TAG_REQUEST_ID: request_id}
        return {
            "Type": "instant",
            "ClientToken": client_token(request_id),
            "LaunchTemplateConfigs": [
                {
                    "LaunchTemplateSpecification": {
                        "LaunchTemplateId": template.template_id,
                        "Version": template.version,
                    },
                    "Overrides": self.overrides(placement_group=placement_group, subnet_in_template=subnet_in_template),
                }
            ],
            "TargetCapacitySpecification": target,
            "SpotOptions": {"AllocationStrategy": self._config.spot_allocation_strategy},
            "OnDemandOptions": {"AllocationStrategy": "lowest-price"},
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": tag_list(tags)},
                {"ResourceType": "fleet", "Tags": tag_list(fleet_tags)},
            ],
        }

    def _offering_for(self, entry: Mapping[str, Any]) -> Offering | None:
        overrides = (entry.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
        instance_type = overrides.get("InstanceType") or entry.get("InstanceType")
        zone = overrides.get("AvailabilityZone") or self._subnet_zone.get(overrides.get("SubnetId", ""))
        market = LIFECYCLE_MARKET.get(str(entry.get("Lifecycle", "")), self.market)
        if instance_type is None:
            return None
        if zone is not None:
            return self._by_pool.get((market.value, instance_type, zone))
        # No zone named: the only offering of that type, if it is unambiguous.
        matches = [o for o in self.offerings if o.instance_type == instance_type and o.market is market]
        return matches[0] if len(matches) == 1 else None

    def outcome(self, response: Mapping[str, Any]) -> FleetOutcome:
        launched: list[LaunchedInstance] = []
        for entry in response.get("Instances") or []:
            offering = self._offering_for(entry)
            if offering is None:  # moto drops AvailabilityZone overrides; fall back to the type
                offering = next(
                    (o for o in self.offerings if o.instance_type == entry.get("InstanceType")),
                    self.offerings[0],
                )
            market = LIFECYCLE_MARKET.get(str(entry.get("Lifecycle", "")), self.market)
            launched.extend(LaunchedInstance(i, offering, market) for i in entry.get("InstanceIds") or [])
        errors = tuple(
            OverrideError(self._offering_for(e), str(e.get("ErrorCode", "Unknown")), str(e.get("ErrorMessage", "")))
            for e in response.get("Errors") or []
        )
        return FleetOutcome(tuple(launched), errors)
