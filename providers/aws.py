"""The AWS provider: spot and on-demand GPU instances on EC2 via boto3.

Implements ``spotfleet.providers.base.Provider``; the pieces live next door:

- ``aws_config``: ``AwsProviderConfig`` (regions, subnets, AMI/launch template…);
- ``aws_prices``: offerings (instance types, zones, spot and on-demand prices);
- ``aws_launch``: launch template versions and the CreateFleet request/response;
- ``aws_placement``: cluster placement groups per gang and EFA interfaces;
- ``aws_events``: the EventBridge → SQS consumer behind ``poll_events()``;
- ``aws_errors``: AWS error codes → typed errors;
- ``aws_iam``: ``REQUIRED_IAM_ACTIONS``, every permission this code needs.

Idempotent launch, three layers deep (each covers a gap of the others):

1. launches this process already made are remembered by request id;
2. before buying, ``DescribeInstances`` looks for instances tagged with the
   request id (a controller that crashed after the cloud call and restarted
   adopts them instead of buying again);
3. ``CreateFleet`` carries ``ClientToken`` = the request id, so two calls racing
   past step 2 (or step 2 missing a just-launched instance, since
   DescribeInstances is eventually consistent) still buy once.

Ownership: every instance and volume is tagged ``spotfleet:cluster`` (and
``spotfleet:request-id``); ``list_instances`` filters by that tag and
``terminate`` re-reads the tags and refuses (``NotOwned``) anything without it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from spotfleet.clock import Clock
from spotfleet.errors import (
    InstanceNotFound,
    InsufficientCapacity,
    NotOwned,
    PermanentError,
    QuotaExceeded,
    Throttled,
)
from spotfleet.model.events import InstanceEvent
from spotfleet.model.offering import Market, Offering, Offerings
from spotfleet.providers.aws_clients import AwsClients
from spotfleet.providers.aws_config import AwsProviderConfig
from spotfleet.providers.aws_errors import (
    AWS_ERRORS,
    THROTTLE_BACKOFF_S,
    ClientError,
    ErrorClass,
    classify,
    error_code,
    translate,
)
from spotfleet.providers.aws_events import SqsEventConsumer
from spotfleet.providers.aws_iam import REQUIRED_IAM_ACTIONS
from spotfleet.providers.aws_launch import FleetOutcome, FleetPlan, LaunchTemplates
from spotfleet.providers.aws_placement import InstanceNetworks, PlacementGroups, efa_interfaces
from spotfleet.providers.aws_prices import PROVIDER, AwsOfferingSource, PriceReport, Zone
from spotfleet.providers.base import (
    TAG_CLUSTER,
    TAG_REQUEST_ID,
    CloudState,
    LaunchRequest,
    ProviderInstance,
)
from spotfleet.providers.bootstrap import render_bootstrap
from spotfleet.providers.gang_placement import TAG_PLACEMENT_GROUP

__all__ = ["REQUIRED_IAM_ACTIONS", "AwsProvider", "AwsProviderConfig", "build_aws_provider"]

log = logging.getLogger(__name__)

STATE_MAP = {
    "pending": CloudState.PENDING,
    "running": CloudState.RUNNING,
    "stopping": CloudState.STOPPING,
    "stopped": CloudState.STOPPING,
    "shutting-down": CloudState.STOPPING,
    "terminated": CloudState.TERMINATED,
}
GONE = frozenset({"shutting-down", "terminated"})
_FILTER_VALUES = 200  # DescribeInstances filter values per call


def _tags(item: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in item.get("Tags") or []}


class AwsProvider:
    """EC2 behind the provider Protocol. See the module docstring."""

    name = PROVIDER

    def __init__(
        self,
        config: AwsProviderConfig,
        *,
        cluster: str,
        clock: Clock,
        session: Any | None = None,
        catalog: Offerings | None = None,
    ) -> None:
        """``session``: a ``boto3.Session`` (tests register botocore hooks on it)."""
        self.config = config
        self.cluster = cluster
        self._clock = clock
        self.clients = AwsClients(config, session=session)
        self.prices = AwsOfferingSource(config, clients=self.clients, clock=clock, catalog=catalog)
        self._templates = LaunchTemplates(config, clients=self.clients, cluster=cluster)
        self.placement_groups = PlacementGroups(
            clients=self.clients, cluster=cluster, clock=clock, extra_tags=config.extra_tags
        )
        self.networks = InstanceNetworks(self.clients)
        self._lock = threading.Lock()
        self._launched: dict[str, list[ProviderInstance]] = {}  # request id → instances
        self._region_of: dict[str, str] = {}  # instance id → region
        self._owned: set[str] = set()
        self._foreign: set[str] = set()
        self._events: SqsEventConsumer | None = None
        if config.sqs_queue_url:
            self._events = SqsEventConsumer(
                queue_url=config.sqs_queue_url,
                sqs=self.clients.sqs(self._queue_region(config.sqs_queue_url)),
                clock=clock,
                owned=self._owned_in_region,
                wait_seconds=config.sqs_wait_seconds,
                max_batches=config.sqs_max_batches,
            )

    def _queue_region(self, url: str) -> str:
        host = url.split("://", 1)[-1].split("/", 1)[0]
        parts = host.split(".")
        if len(parts) >= 3 and parts[0] == "sqs":
            return parts[1]
        return self.config.regions[0]

    # -- offerings ------------------------------------------------------------------------

    def offerings(self) -> Offerings:
        """GPU offerings with live prices where available (cached; see ``aws_prices``)."""
        return self.prices.offerings()

    def refresh_prices(self, *, force: bool = False) -> Offerings:
        """The scheduled price refresh step (APScheduler calls this, tests too)."""
        return self.prices.refresh(force=force)

    @property
    def price_report(self) -> PriceReport:
        return self.prices.report

    # -- launch ---------------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> list[ProviderInstance]:
        """Buy ``request.count`` instances with one instant fleet (idempotent per request id)."""
        with self._lock:
            if request.request_id in self._launched:
                return list(self._launched[request.request_id])
        existing = self._find_request(request)
        if existing:
            log.info("launch %s already made %d instance(s); buying nothing", request.request_id, len(existing))
            self._remember(request.request_id, existing)
            return existing
        offerings = self._acceptable(request)
        region = offerings[0].region
        zones = {z.name: z for z in self.prices.zones(region)}
        unknown = [o for o in offerings if o.zone not in zones]
        if unknown:
            raise PermanentError(f"aws: zones not in {region}: {sorted({o.zone for o in unknown})}")
        tags = {
            **self.config.extra_tags,
            **dict(request.tags),
            TAG_CLUSTER: self.cluster,
            TAG_REQUEST_ID: request.request_id,
        }
        nics: list[dict[str, Any]] = []
        group = request.placement_group
        if group:
            # A gang member: its primary pool only (a cluster group is one zone, a
            # gang one type), in the gang's group, with EFA where the type has it.
            offerings = [offerings[0]]
            self.placement_groups.ensure(region, group)
            tags[TAG_PLACEMENT_GROUP] = group
            nics = self._efa_interfaces(region, offerings[0], zones[offerings[0].zone])
        user_data = render_bootstrap(request.bootstrap, metadata_flavor="aws")
        template = self._templates.version_for(
            region,
            request_id=request.request_id,
            user_data=user_data,
            volume_tags={**self.config.extra_tags, TAG_CLUSTER: self.cluster, TAG_REQUEST_ID: request.request_id},
            network_interfaces=nics,
        )
        plan = FleetPlan(offerings=offerings, zones=zones, config=self.config)
        params = plan.request(
            request_id=request.request_id,
            count=request.count,
            template=template,
            tags=tags,
            placement_group=group,
            subnet_in_template=bool(nics),
        )
        try:
            response = self.clients.ec2(region).create_fleet(**params)
        except ClientError as err:
            if classify(error_code(err)) is ErrorClass.CAPACITY:
                raise InsufficientCapacity(offerings, f"CreateFleet: {error_code(err)}: {err}") from err
            if error_code(err) == "IdempotentParameterMismatch":
                # This request id already made a fleet (with an older agent token):
                # adopt its instances once DescribeInstances shows them.
                adopted = self._find_request(request)
                if adopted:
                    self._remember(request.request_id, adopted)
                    return adopted
                raise Throttled(
                    THROTTLE_BACKOFF_S,
                    f"CreateFleet: request {request.request_id} already launched; waiting for its instances to appear",
                ) from err
            raise translate(err, operation="CreateFleet") from err
        except AWS_ERRORS as err:
            raise translate(err, operation="CreateFleet") from err
        outcome = plan.outcome(response)
        instances = self._instances_from(outcome, region=region, tags=tags)
        if not instances:
            raise self._launch_error(outcome, offerings)
        for error in outcome.errors:
            key = error.offering.key if error.offering else "?"
            log.warning("launch %s: %s failed: %s: %s", request.request_id, key, error.code, error.message)
        self._remember(request.request_id, instances)
        return instances

    def _efa_interfaces(self, region: str, offering: Offering, zone: Zone) -> list[dict[str, Any]]:
        """EFA interfaces for an EFA-capable type (none otherwise), in the zone's first subnet."""
        count = self.networks.info(region, offering.instance_type).efa_interfaces
        if not count:
            return []
        subnets = self.config.subnets_for(zone_name=zone.name, zone_id=zone.zone_id)
        subnet = subnets[0] if subnets else self.networks.default_subnet(region, zone.name)
        return efa_interfaces(count, subnet_id=subnet, security_groups=self.config.security_group_ids)

    def _acceptable(self, request: LaunchRequest) -> list[Offering]:
        """The request's offerings CreateFleet can try in one call.

        One fleet is one region and one market (its DefaultTargetCapacityType):
        alternatives in another region or market are left out; the planner asks
        again for them if this launch fails.
        """
        primary = request.offering
        if primary.provider != PROVIDER:
            raise PermanentError(f"aws: cannot launch a {primary.provider} offering ({primary.key})")
        if primary.region not in self.config.regions:
            raise PermanentError(f"aws: region {primary.region} is not configured ({self.config.regions})")
        chosen: dict[str, Offering] = {}
        for offering in request.acceptable:
            if (offering.provider, offering.region, offering.market) == (PROVIDER, primary.region, primary.market):
                chosen.setdefault(offering.key, offering)
        return list(chosen.values())

    def _launch_error(self, outcome: FleetOutcome, offerings: list[Offering]) -> Exception:
        """The typed error for a fleet that launched nothing.

        Order: a quota blocks every pool, so it wins; then capacity (naming exactly
        the pools that reported it); then throttling; anything else is permanent,
        with AWS's messages kept for the operator.
        """
        text = "; ".join(f"{e.code}: {e.message}" for e in outcome.errors) or "no instances and no errors"
        kinds = [(classify(e.code), e) for e in outcome.errors]
        if any(k is ErrorClass.QUOTA for k, _ in kinds):
            return QuotaExceeded(f"CreateFleet: {text}")
        capacity = [e for k, e in kinds if k is ErrorClass.CAPACITY]
        if capacity or not outcome.errors:
            named: dict[str, Offering] = {}
            for error in capacity:
                for offering in [error.offering] if error.offering else offerings:
                    named.setdefault(offering.key, offering)
            return InsufficientCapacity(list(named.values()) or offerings, f"CreateFleet: {text}")
        if any(k is ErrorClass.THROTTLED for k, _ in kinds):
            return Throttled(30.0, f"CreateFleet: {text}")
        return PermanentError(f"CreateFleet: {text}")

    def _instances_from(self, outcome: FleetOutcome, *, region: str, tags: dict[str, str]) -> list[ProviderInstance]:
        now = self._clock.now()
        return [
            ProviderInstance(
                provider=PROVIDER,
                provider_id=launched.instance_id,
                instance_type=launched.offering.instance_type,
                region=region,
                zone=launched.offering.zone,
                market=launched.market,
                state=CloudState.PENDING,
                tags=dict(tags),
                launched_at=now,
            )
            for launched in outcome.launched
        ]

    def _remember(self, request_id: str, instances: list[ProviderInstance]) -> None:
        with self._lock:
            self._launched[request_id] = list(instances)
            for instance in instances:
                self._region_of[instance.provider_id] = instance.region
                self._owned.add(instance.provider_id)

    def _find_request(self, request: LaunchRequest) -> list[ProviderInstance]:
        region = request.offering.region
        if region not in self.config.regions:
            return []
        return self._describe(
            region,
            [
                {"Name": f"tag:{TAG_CLUSTER}", "Values": [self.cluster]},
                {"Name": f"tag:{TAG_REQUEST_ID}", "Values": [request.request_id]},
            ],
        )

    # -- describe / list / get ------------------------------------------------------------

    def _raw(self, region: str, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
        try:
            pages = self.clients.ec2(region).get_paginator("describe_instances").paginate(Filters=filters)
            return [item for page in pages for r in page.get("Reservations", []) for item in r.get("Instances", [])]
        except AWS_ERRORS as err:
            raise translate(err, operation="DescribeInstances") from err

    def _describe(self, region: str, filters: list[dict[str, Any]]) -> list[ProviderInstance]:
        return [self._to_instance(item, region) for item in self._raw(region, filters)]

    def _to_instance(self, item: dict[str, Any], region: str) -> ProviderInstance:
        launched_at = item.get("LaunchTime")
        instance = ProviderInstance(
            provider=PROVIDER,
            provider_id=item["InstanceId"],
            instance_type=item["InstanceType"],
            region=region,
            zone=(item.get("Placement") or {}).get("AvailabilityZone", ""),
            market=Market.SPOT if item.get("InstanceLifecycle") == "spot" else Market.ON_DEMAND,
            state=STATE_MAP.get(item["State"]["Name"], CloudState.PENDING),
            tags=_tags(item),
            launched_at=launched_at if isinstance(launched_at, datetime) else None,
            address=item.get("PrivateIpAddress") or item.get("PublicIpAddress"),
        )
        with self._lock:
            self._region_of[instance.provider_id] = region
            if instance.tags.get(TAG_CLUSTER) == self.cluster:
                self._owned.add(instance.provider_id)
        return instance

    def list_instances(self) -> list[ProviderInstance]:
        """Every instance tagged with this cluster, in every configured region.

        On the side (at most once a minute per region), placement groups no live
        instance of the region uses any more are deleted: the listing is the
        one place that sees every instance of the cluster.
        """
        found: list[ProviderInstance] = []
        for region in self.config.regions:
            listed = self._describe(region, [{"Name": f"tag:{TAG_CLUSTER}", "Values": [self.cluster]}])
            found.extend(listed)
            self.collect_placement_groups(region, listed)
        return found

    def collect_placement_groups(
        self, region: str, listed: Sequence[ProviderInstance] | None = None, *, force: bool = False
    ) -> list[str]:
        """Delete this cluster's empty placement groups in ``region``; the names deleted."""
        if listed is None:
            listed = self._describe(region, [{"Name": f"tag:{TAG_CLUSTER}", "Values": [self.cluster]}])
        in_use = {
            i.tags[TAG_PLACEMENT_GROUP]
            for i in listed
            if TAG_PLACEMENT_GROUP in i.tags and i.state is not CloudState.TERMINATED
        }
        return self.placement_groups.collect(region, in_use, force=force)

    def _by_ids(self, ids: Sequence[str]) -> dict[str, tuple[dict[str, Any], str]]:
        """Raw DescribeInstances items for these ids → (item, region); missing ids absent.

        Filtering by ``instance-id`` (not ``InstanceIds=``) returns what exists
        instead of failing the whole call on the first unknown id.
        """
        found: dict[str, tuple[dict[str, Any], str]] = {}
        wanted = list(dict.fromkeys(ids))
        with self._lock:
            known = {i: self._region_of[i] for i in wanted if i in self._region_of}
        regions = sorted(set(known.values())) + [r for r in self.config.regions if r not in known.values()]
        for region in regions:
            missing = [i for i in wanted if i not in found]
            if not missing:
                break
            for start in range(0, len(missing), _FILTER_VALUES):
                chunk = missing[start : start + _FILTER_VALUES]
                for item in self._raw(region, [{"Name": "instance-id", "Values": chunk}]):
                    found[item["InstanceId"]] = (item, region)
        return found

    def get(self, provider_id: str) -> ProviderInstance:
        """One instance of this cluster; ``InstanceNotFound`` if unknown, ``NotOwned`` if foreign."""
        found = self._by_ids([provider_id]).get(provider_id)
        if found is None:
            raise InstanceNotFound(provider_id)
        instance = self._to_instance(*found)
        if instance.tags.get(TAG_CLUSTER) != self.cluster:
            raise NotOwned(provider_id)
        return instance

    # -- terminate ------------------------------------------------------------------------

    def terminate(self, provider_ids: Sequence[str], *, request_id: str) -> None:
        """Terminate instances this cluster owns; all-or-nothing on the checks.

        Every id is checked before anything is terminated: an unknown id raises
        ``InstanceNotFound``, one without this cluster's tag raises ``NotOwned``
        (the tags are re-read from EC2 now, never taken from a cache). Already
        terminated or shutting-down instances are skipped.
        """
        found = self._by_ids(provider_ids)
        by_region: dict[str, list[str]] = {}
        for instance_id in dict.fromkeys(provider_ids):
            if instance_id not in found:
                raise InstanceNotFound(instance_id)
            item, region = found[instance_id]
            if _tags(item).get(TAG_CLUSTER) != self.cluster:
                raise NotOwned(instance_id)
            if item["State"]["Name"] not in GONE:
                by_region.setdefault(region, []).append(instance_id)
        for region, ids in by_region.items():
            log.info("terminate %s (request %s) in %s", ids, request_id, region)
            try:
                self.clients.ec2(region).terminate_instances(InstanceIds=ids)
            except ClientError as err:
                if error_code(err) == "InvalidInstanceID.NotFound":
                    raise InstanceNotFound(ids[0]) from err
                raise translate(err, operation="TerminateInstances") from err
            except AWS_ERRORS as err:
                raise translate(err, operation="TerminateInstances") from err

    # -- events ---------------------------------------------------------------------------

    def poll_events(self) -> list[InstanceEvent]:
        """Interruption, rebalance, maintenance and termination events since the last call."""
        if self._events is None:
            return []
        return self._events.poll()

    def _owned_in_region(self, region: str, ids: list[str]) -> set[str]:
        """Which of these ids carry this cluster's tag (cached; foreign ids are cached too)."""
        with self._lock:
            owned = {i for i in ids if i in self._owned}
            unknown = [i for i in ids if i not in self._owned and i not in self._foreign]
        if unknown and region in self.config.regions:
            found = self._by_ids(unknown)
            for instance_id in unknown:
                item = found.get(instance_id)
                if item is not None and _tags(item[0]).get(TAG_CLUSTER) == self.cluster:
                    owned.add(instance_id)
                    with self._lock:
                        self._owned.add(instance_id)
                        self._region_of[instance_id] = item[1]
                elif item is not None:  # untagged or another cluster's; never ours
                    with self._lock:
                        if len(self._foreign) > 10_000:
                            self._foreign.clear()
                        self._foreign.add(instance_id)
        return owned

    def zones(self, region: str) -> list[Zone]:
        return self.prices.zones(region)


def build_aws_provider(
    options: Mapping[str, Any], *, cluster: str, clock: Clock, data_dir: Path | None = None
) -> AwsProvider:
    """The provider registry's factory: ``providers: {aws: {...}}`` in the controller config.

    ``options`` are ``AwsProviderConfig`` fields; a pydantic ``ValidationError``
    propagates for the registry to turn into ``InvalidSpec``. ``data_dir`` is
    unused: every fact the adapter needs is in the cloud (tags) or re-read.
    """
    del data_dir
    return AwsProvider(AwsProviderConfig.model_validate(dict(options)), cluster=cluster, clock=clock)
