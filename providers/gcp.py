"""The GCP provider: Compute Engine Spot VMs behind spotfleet's Provider Protocol.

Contracts are those of ``providers/base.py``; how this adapter keeps them:

- **Idempotent launch.** A launch first lists VMs labelled with the request id
  and returns them if any exist. Otherwise each insert carries a ``requestId``
  (a UUID derived from the spotfleet request id and the offering) and a VM name
  derived from the request id, so a retry after a crash is answered by GCE with
  the original operation (or ``alreadyExists``), never a second VM.
- **Stockouts name the offering.** ``ZONE_RESOURCE_POOL_EXHAUSTED`` (as an HTTP
  503 or in the finished operation) becomes ``InsufficientCapacity`` for exactly
  that offering; the launch then tries ``request.alternatives`` in order and, if
  all are out, raises naming every offering that was out.
- **Operations are waited on with ``ZoneOperationsClient.wait``** built from the
  same client options: ``insert()``'s ExtendedOperation poller ignores a custom
  endpoint, so ``insert_unary()`` is used (see shared DESIGN.md). A wait returns
  after at most ~2 minutes on GCE; after ``operation_wait_rounds`` rounds an
  unfinished launch is returned as PENDING (the list is eventually consistent).
- **No hidden retries.** Every call passes ``retry=None``: the reconcile loop is
  the retry loop, and a 429/5xx comes back as ``Throttled`` at once instead of
  sleeping inside a step.
- **Ownership.** Everything is filtered by the ``spotfleet-cluster`` label;
  ``terminate`` refuses (``NotOwned``) a VM without it and checks the whole
  batch before deleting any; ``get`` of a VM that is not ours is
  ``InstanceNotFound`` (it is not in this cluster's world).

Instance ids are ``<zone>/<name>`` (``gcp_resources.provider_id``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import google.auth.exceptions
import httpx
from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials, Credentials
from google.cloud import compute_v1

from spotfleet.catalog import load_catalog
from spotfleet.clock import Clock
from spotfleet.errors import InstanceNotFound, InsufficientCapacity, MissingCredentials, NotOwned, PermanentError
from spotfleet.model.events import InstanceEvent
from spotfleet.model.offering import Offering, Offerings
from spotfleet.providers import gcp_labels as labels_
from spotfleet.providers import gcp_pricing
from spotfleet.providers.base import TAG_REQUEST_ID, CloudState, LaunchRequest, ProviderInstance
from spotfleet.providers.bootstrap import render_bootstrap
from spotfleet.providers.gang_placement import TAG_PLACEMENT_GROUP
from spotfleet.providers.gcp_config import GcpProviderConfig
from spotfleet.providers.gcp_errors import from_api_error, from_operation
from spotfleet.providers.gcp_events import PREEMPTED_FILTER, EventTracker
from spotfleet.providers.gcp_offerings import ZoneInventory, build_offerings, configured_zones
from spotfleet.providers.gcp_placement import PlacementPolicies
from spotfleet.providers.gcp_resources import (
    PROVIDER,
    instance_fields,
    provider_id,
    region_of,
    split_provider_id,
    to_provider_instance,
)

T = TypeVar("T")
log = logging.getLogger(__name__)

# zoneOperations.wait returns after at most ~2 minutes on GCE; allow for that.
_WAIT_TIMEOUT_S = 150.0
_DONE = compute_v1.Operation.Status.DONE


@dataclass(frozen=True, slots=True)
class GcpClients:
    """The Compute Engine clients the provider uses, sharing client options."""

    instances: compute_v1.InstancesClient
    zone_operations: compute_v1.ZoneOperationsClient
    machine_types: compute_v1.MachineTypesClient
    accelerator_types: compute_v1.AcceleratorTypesClient
    resource_policies: compute_v1.ResourcePoliciesClient
    region_operations: compute_v1.RegionOperationsClient

    @classmethod
    def create(cls, *, api_endpoint: str | None, credentials: Credentials | None) -> GcpClients:
        options = ClientOptions(api_endpoint=api_endpoint) if api_endpoint else None
        kwargs: dict[str, Any] = {"credentials": credentials, "client_options": options}
        try:
            return cls(
                instances=compute_v1.InstancesClient(**kwargs),
                zone_operations=compute_v1.ZoneOperationsClient(**kwargs),
                machine_types=compute_v1.MachineTypesClient(**kwargs),
                accelerator_types=compute_v1.AcceleratorTypesClient(**kwargs),
                resource_policies=compute_v1.ResourcePoliciesClient(**kwargs),
                region_operations=compute_v1.RegionOperationsClient(**kwargs),
            )
        except google.auth.exceptions.DefaultCredentialsError as exc:
            raise MissingCredentials(
                "no Google credentials: run on a VM with a service account, set "
                "GOOGLE_APPLICATION_CREDENTIALS, or `gcloud auth application-default login`"
            ) from exc


class GcpProvider:
    """Compute Engine, as spotfleet sees it (see the module docstring)."""

    name = PROVIDER

    def __init__(
        self,
        config: GcpProviderConfig,
        *,
        cluster: str,
        clock: Clock,
        credentials: Credentials | None = None,
    ) -> None:
        self._config = config
        self._cluster = cluster
        self._clock = clock
        if credentials is None and config.anonymous_credentials:
            credentials = AnonymousCredentials()  # type: ignore[no-untyped-call]
        self._clients = GcpClients.create(api_endpoint=config.api_endpoint, credentials=credentials)
        self._catalog = load_catalog([PROVIDER])
        self.zones = configured_zones(config, self._catalog)
        self._offerings: tuple[datetime, Offerings] | None = None
        self.last_repricing: gcp_pricing.Repriced | None = None
        self._events = EventTracker(name_prefix=labels_.name_prefix(cluster), notice=config.preemption_notice)
        self.placement = PlacementPolicies(
            clients=self._clients, project=config.project, cluster=cluster, clock=clock, opts=self._opts
        )

    # -- plumbing --------------------------------------------------------------

    def _call(
        self,
        fn: Callable[[], T],
        *,
        offering: Offering | None = None,
        instance_id: str | None = None,
    ) -> T:
        """Run one API call (pages included), translating failures to typed errors."""
        try:
            return fn()
        except gexc.GoogleAPICallError as exc:
            raise from_api_error(
                exc,
                offering=offering,
                instance_id=instance_id,
                default_retry_after=self._config.default_retry_after_s,
            ) from exc

    @property
    def _opts(self) -> dict[str, Any]:
        return {"retry": None, "timeout": self._config.request_timeout_s}

    def _wait(
        self, zone: str, operation: compute_v1.Operation, *, offering: Offering | None = None
    ) -> compute_v1.Operation:
        zone_operations = self._clients.zone_operations

        def wait(name: str) -> compute_v1.Operation:
            return zone_operations.wait(
                project=self._config.project,
                zone=zone,
                operation=name,
                retry=None,
                timeout=_WAIT_TIMEOUT_S,
            )

        for _ in range(self._config.operation_wait_rounds):
            if operation.status == _DONE:
                break
            operation = self._call(functools.partial(wait, operation.name), offering=offering)
        return operation

    def _list_zone(self, zone: str, filter_: str) -> list[ProviderInstance]:
        request = compute_v1.ListInstancesRequest(project=self._config.project, zone=zone, filter=filter_)
        raw = self._call(lambda: list(self._clients.instances.list(request=request, **self._opts)))
        return [to_provider_instance(i) for i in raw if labels_.owned(i.labels, self._cluster)]

    def _get_raw(self, zone: str, name: str, pid: str) -> compute_v1.Instance:
        return self._call(
            lambda: self._clients.instances.get(project=self._config.project, zone=zone, instance=name, **self._opts),
            instance_id=pid,
        )

    # -- offerings -------------------------------------------------------------

    def _inventory(self, zone: str) -> ZoneInventory:
        project = self._config.project
        machine_types = self._call(
            lambda: list(self._clients.machine_types.list(project=project, zone=zone, **self._opts))
        )
        accelerators = self._call(
            lambda: list(self._clients.accelerator_types.list(project=project, zone=zone, **self._opts))
        )
        return ZoneInventory(
            sizes={m.name: (float(m.guest_cpus), m.memory_mb / 1024) for m in machine_types},
            accelerators=frozenset(a.name for a in accelerators),
        )

    def offerings(self) -> Offerings:
        """Catalog offerings that exist in the configured zones (cached for ``offerings_ttl``)."""
        now = self._clock.now()
        if self._offerings and now - self._offerings[0] < self._config.offerings_ttl:
            return self._offerings[1]
        inventories = {zone: self._inventory(zone) for zone in self.zones}
        result = build_offerings(self._config, inventories, catalog=self._catalog)
        if self._config.billing_refresh:
            result = self._refresh_prices(result, now)
        self._offerings = (now, result)
        return result

    def _refresh_prices(self, offerings: Offerings, now: datetime) -> Offerings:
        """Reprice from the Billing Catalog; on any HTTP failure keep catalog prices."""
        config = self._config
        key = config.billing_api_key.get_secret_value() if config.billing_api_key else None
        try:
            with httpx.Client(base_url=config.billing_endpoint, timeout=config.request_timeout_s) as http:
                skus = gcp_pricing.fetch_skus(http, api_key=key)
        except httpx.HTTPError as exc:
            log.warning("Cloud Billing Catalog unavailable, keeping catalog prices: %s", exc)
            return offerings
        self.last_repricing = gcp_pricing.reprice(offerings, skus, now=now)
        log.info(
            "repriced %d GCP offerings from the Billing Catalog (%d kept catalog prices)",
            self.last_repricing.updated,
            self.last_repricing.skipped,
        )
        return self.last_repricing.offerings

    # -- launch ----------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> list[ProviderInstance]:
        """Buy ``request.count`` VMs of the first acceptable offering with capacity."""
        if request.count < 1:
            raise PermanentError(f"launch {request.request_id}: count must be ≥ 1, got {request.count}")
        foreign = [o.key for o in request.acceptable if o.provider != PROVIDER]
        if foreign:
            raise PermanentError(f"launch {request.request_id}: not GCP offerings: {foreign}")
        zones = dict.fromkeys(o.zone for o in request.acceptable)
        flt = labels_.request_filter(self._cluster, request.request_id)
        existing = [i for zone in zones for i in self._list_zone(zone, flt)]
        if existing:
            return existing
        stocked_out: list[Offering] = []
        # A gang member: its primary offering only (compact placement is one zone,
        # a gang one shape); a stockout there moves the whole gang (the planner).
        candidates = (request.offering,) if request.placement_group else request.acceptable
        for offering in candidates:
            try:
                return self._launch_in(offering, request)
            except InsufficientCapacity as exc:
                stocked_out.extend(exc.offerings)
        raise InsufficientCapacity(stocked_out)

    def _launch_in(self, offering: Offering, request: LaunchRequest) -> list[ProviderInstance]:
        config, zone = self._config, offering.zone
        tags = {
            **labels_.with_ownership(request.tags, self._cluster),
            TAG_REQUEST_ID: request.request_id,
        }
        policies: list[str] = []
        if request.placement_group:
            policies = [self.placement.ensure(region_of(zone), request.placement_group)]
            tags[TAG_PLACEMENT_GROUP] = request.placement_group
        fields = functools.partial(
            instance_fields,
            config=config,
            offering=offering,
            labels={**config.labels, **labels_.tags_to_labels(tags)},
            tags=tags,
            startup_script=render_bootstrap(request.bootstrap, metadata_flavor="gcp"),
        )
        gce_request_id = labels_.gce_request_id(request.request_id, scope=offering.key)
        name = labels_.instance_name(self._cluster, request.request_id)
        instances = self._clients.instances
        operation: compute_v1.Operation | None
        try:
            if request.count == 1:
                insert = compute_v1.InsertInstanceRequest(
                    project=config.project,
                    zone=zone,
                    instance_resource=compute_v1.Instance(name=name, resource_policies=policies, **fields(zonal=True)),
                    request_id=gce_request_id,
                )
                operation = instances.insert_unary(request=insert, **self._opts)
            else:
                bulk = compute_v1.BulkInsertInstanceRequest(
                    project=config.project,
                    zone=zone,
                    bulk_insert_instance_resource_resource=compute_v1.BulkInsertInstanceResource(
                        count=request.count,
                        min_count=1,  # partial fulfilment: the Protocol returns fewer
                        name_pattern=labels_.bulk_name_pattern(self._cluster, request.request_id, request.count),
                        instance_properties=compute_v1.InstanceProperties(
                            resource_policies=[p.rsplit("/", 1)[-1] for p in policies], **fields(zonal=False)
                        ),
                    ),
                    request_id=gce_request_id,
                )
                operation = instances.bulk_insert_unary(request=bulk, **self._opts)
        except gexc.Conflict:
            operation = None  # our deterministic name exists: this request already launched it
        except gexc.GoogleAPICallError as exc:
            raise from_api_error(exc, offering=offering, default_retry_after=config.default_retry_after_s) from exc
        if operation is not None:
            operation = self._wait(zone, operation, offering=offering)
        if operation is not None and operation.status == _DONE:
            error = from_operation(operation, offering=offering, default_retry_after=config.default_retry_after_s)
            if error is not None:
                raise error
        launched = self._list_zone(zone, labels_.request_filter(self._cluster, request.request_id))
        if not launched and operation is not None and operation.status != _DONE:
            names = labels_.launch_names(self._cluster, request.request_id, request.count)
            launched = [self._pending(offering, n, tags) for n in names]
        self._events.remember(i.provider_id for i in launched)
        return launched

    def _pending(self, offering: Offering, name: str, tags: dict[str, str]) -> ProviderInstance:
        """A VM GCE accepted but has not listed yet (eventual consistency)."""
        return ProviderInstance(
            provider=PROVIDER,
            provider_id=provider_id(offering.zone, name),
            instance_type=offering.instance_type,
            region=region_of(offering.zone),
            zone=offering.zone,
            market=offering.market,
            state=CloudState.PENDING,
            tags=tags,
        )

    # -- terminate / list / get -------------------------------------------------

    def terminate(self, provider_ids: Sequence[str], *, request_id: str) -> None:
        """Delete our VMs; refuse the whole batch if any is not ours."""
        targets: list[tuple[str, str, str]] = []
        for pid in provider_ids:
            location = split_provider_id(pid)
            if location is None:
                raise InstanceNotFound(pid)
            zone, name = location
            try:
                instance = self._get_raw(zone, name, pid)
            except InstanceNotFound:
                if self._events.knows(pid):
                    continue  # ours, already gone (preempted with DELETE, or deleted earlier)
                raise
            if not labels_.owned(instance.labels, self._cluster):
                raise NotOwned(pid)
            targets.append((pid, zone, name))
        for pid, zone, name in targets:
            delete = compute_v1.DeleteInstanceRequest(
                project=self._config.project,
                zone=zone,
                instance=name,
                request_id=labels_.gce_request_id(request_id, scope=f"delete/{pid}"),
            )
            try:
                operation = self._call(
                    lambda d=delete: self._clients.instances.delete_unary(request=d, **self._opts),  # type: ignore[misc]
                    instance_id=pid,
                )
            except InstanceNotFound:
                continue  # deleted between the check and the call: the goal is reached
            error = from_operation(operation, instance_id=pid)
            if error is not None and not isinstance(error, InstanceNotFound):
                raise error

    def list_instances(self) -> list[ProviderInstance]:
        """Every VM labelled for this cluster, across the configured zones (paginated).

        On the side (at most once a minute per region), placement policies no VM
        of the cluster uses any more are deleted (see ``gcp_placement``).
        """
        flt = labels_.cluster_filter(self._cluster)
        found = [i for zone in self.zones for i in self._list_zone(zone, flt)]
        self._events.remember(i.provider_id for i in found)
        for region in sorted({region_of(z) for z in self.zones}):
            self.collect_placement_policies(region, found)
        return found

    def collect_placement_policies(
        self, region: str, listed: Sequence[ProviderInstance] | None = None, *, force: bool = False
    ) -> list[str]:
        """Delete this cluster's unused placement policies in ``region``; the names deleted.

        Every listed VM counts, stopped ones too: GCE keeps their policy attached.
        """
        if listed is None:
            flt = labels_.cluster_filter(self._cluster)
            listed = [i for zone in self.zones for i in self._list_zone(zone, flt)]
        in_use = {i.tags[TAG_PLACEMENT_GROUP] for i in listed if TAG_PLACEMENT_GROUP in i.tags}
        return self.placement.collect(region, in_use, force=force)

    def get(self, provider_id: str) -> ProviderInstance:
        location = split_provider_id(provider_id)
        if location is None:
            raise InstanceNotFound(provider_id)
        instance = self._get_raw(*location, provider_id)
        if not labels_.owned(instance.labels, self._cluster):
            raise InstanceNotFound(provider_id)
        return to_provider_instance(instance)

    # -- events ----------------------------------------------------------------

    def poll_events(self) -> list[InstanceEvent]:
        """Preemptions (zone operations) and terminations (status, disappearance)."""
        now = self._clock.now()
        events: list[InstanceEvent] = []
        for zone in self.zones:
            request = compute_v1.ListZoneOperationsRequest(
                project=self._config.project, zone=zone, filter=PREEMPTED_FILTER
            )
            operations = self._call(
                lambda r=request: list(self._clients.zone_operations.list(request=r, **self._opts))  # type: ignore[misc]
            )
            events.extend(self._events.from_operations(zone, operations, now))
        flt = labels_.cluster_filter(self._cluster)
        current = [i for zone in self.zones for i in self._list_zone(zone, flt)]
        events.extend(self._events.from_instances(current, now))
        return events


def from_options(
    options: Mapping[str, Any], *, cluster: str, clock: Clock, data_dir: Path | None = None
) -> GcpProvider:
    """Registry factory: ``providers: {gcp: {...}}`` in the controller config.

    Validation errors propagate as pydantic ``ValidationError`` so the registry
    reports them under ``providers.gcp.<field>``. Credentials come from the
    environment (Application Default Credentials); ``data_dir`` is unused.
    """
    return GcpProvider(GcpProviderConfig.model_validate(dict(options)), cluster=cluster, clock=clock)
