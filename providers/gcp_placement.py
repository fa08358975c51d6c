"""Gang placement on Compute Engine: a compact placement resource policy per gang.

A gang's members are launched one per ``LaunchRequest``, all naming the
planner's ``placement_group`` (``pg-<job>-<attempt>``). ``PlacementPolicies``
makes that a regional resource policy with ``groupPlacementPolicy.collocation
= COLLOCATED`` (compact placement: the VMs on nearby hosts, low latency between
them), created by the first member and attached to every member at insert
(``Instance.resourcePolicies``).

Resource policies carry no labels, so ownership is in the name (the cluster's
``sf-<5 hex>-`` prefix, as for VMs) and the description
(``spotfleet:cluster=<cluster> created-at=<iso>``): a same-named policy without
this cluster's description is refused (``NotOwned``), never attached.

``collect`` deletes this cluster's policies that no VM of the cluster uses (VMs
carry the ``spotfleet:placement-group`` tag, a label) once older than
``GROUP_GRACE`` (a younger one may be between its insert and the VM insert).
GCE refuses to delete a policy a VM still references (a stopped Spot VM too),
so a refusal just waits for the next round.
"""

from __future__ import annotations

import logging
import re
import threading
from datetime import datetime
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as gexc
from google.cloud import compute_v1

from spotfleet.clock import Clock
from spotfleet.errors import NotOwned
from spotfleet.providers import gcp_labels as labels_
from spotfleet.providers.gang_placement import GROUP_GRACE, CollectionPacer
from spotfleet.providers.gcp_errors import from_api_error, from_operation

if TYPE_CHECKING:
    from spotfleet.providers.gcp import GcpClients

log = logging.getLogger(__name__)

_DONE = compute_v1.Operation.Status.DONE
_DESCRIPTION = re.compile(r"^spotfleet:cluster=(?P<cluster>\S+) created-at=(?P<at>\S+)$")


def policy_name(cluster: str, group: str) -> str:
    """A valid GCE name (``[a-z]([-a-z0-9]*[a-z0-9])?``, ≤ 63) for a gang's group."""
    body = re.sub(r"[^a-z0-9-]+", "-", group.lower()).strip("-")
    name = f"{labels_.name_prefix(cluster)}{body}"
    if len(name) > 63:
        name = f"{labels_.name_prefix(cluster)}{labels_.gce_request_id(group, scope='pg')[:20]}"
    return name


class PlacementPolicies:
    """This cluster's compact placement policies: one per gang, deleted when unused."""

    def __init__(self, *, clients: GcpClients, project: str, cluster: str, clock: Clock, opts: dict[str, Any]) -> None:
        self._clients = clients
        self._project = project
        self._cluster = cluster
        self._clock = clock
        self._opts = opts
        self._lock = threading.Lock()
        self._ready: set[tuple[str, str]] = set()
        self._pacer = CollectionPacer()

    def url(self, region: str, name: str) -> str:
        return f"projects/{self._project}/regions/{region}/resourcePolicies/{name}"

    def _owned(self, policy: compute_v1.ResourcePolicy) -> datetime | None:
        """The policy's creation time if this cluster made it, else ``None``."""
        match = _DESCRIPTION.match(policy.description or "")
        if match is None or match["cluster"] != self._cluster:
            return None
        try:
            return datetime.fromisoformat(match["at"])
        except ValueError:
            return None

    def ensure(self, region: str, group: str) -> str:
        """The policy's URL, inserting it the first time; refuse one this cluster did not make."""
        name = policy_name(self._cluster, group)
        with self._lock:
            if (region, name) in self._ready:
                return self.url(region, name)
        policy = compute_v1.ResourcePolicy(
            name=name,
            description=f"spotfleet:cluster={self._cluster} created-at={self._clock.now().isoformat()}",
            group_placement_policy=compute_v1.ResourcePolicyGroupPlacementPolicy(collocation="COLLOCATED"),
        )
        insert = compute_v1.InsertResourcePolicyRequest(
            project=self._project,
            region=region,
            resource_policy_resource=policy,
            request_id=labels_.gce_request_id(f"{self._cluster}/{group}", scope=f"policy/{region}"),
        )
        try:
            operation = self._clients.resource_policies.insert_unary(request=insert, **self._opts)
            if operation.status != _DONE:
                operation = self._clients.region_operations.wait(
                    project=self._project, region=region, operation=operation.name, **self._opts
                )
            error = from_operation(operation)
            if error is not None:
                raise error
            log.info("created compact placement policy %s in %s", name, region)
        except gexc.Conflict:
            existing = self._get(region, name)
            if self._owned(existing) is None:
                raise NotOwned(f"resource policy {name} in {region}") from None
        except gexc.GoogleAPICallError as exc:
            raise from_api_error(exc) from exc
        with self._lock:
            self._ready.add((region, name))
        return self.url(region, name)

    def _get(self, region: str, name: str) -> compute_v1.ResourcePolicy:
        try:
            return self._clients.resource_policies.get(
                project=self._project, region=region, resource_policy=name, **self._opts
            )
        except gexc.GoogleAPICallError as exc:
            raise from_api_error(exc) from exc

    def collect(self, region: str, in_use: set[str], *, force: bool = False) -> list[str]:
        """Delete this cluster's policies in ``region`` no VM uses; the names deleted. Never raises."""
        now = self._clock.now()
        if not self._pacer.due(region, now, force=force):
            return []
        used = {policy_name(self._cluster, g) for g in in_use}
        deleted: list[str] = []
        try:
            # No server-side filter: a region holds few policies, and ownership is
            # the description, which ``_owned`` checks.
            request = compute_v1.ListResourcePoliciesRequest(project=self._project, region=region)
            policies = list(self._clients.resource_policies.list(request=request, **self._opts))
        except gexc.GoogleAPICallError as exc:
            log.warning("could not list resource policies in %s: %s", region, exc)
            return deleted
        for policy in policies:
            created = self._owned(policy)
            if created is None or policy.name in used or now - created < GROUP_GRACE:
                continue
            try:
                self._clients.resource_policies.delete_unary(
                    project=self._project, region=region, resource_policy=policy.name, **self._opts
                )
            except gexc.GoogleAPICallError as exc:  # still referenced by a VM: next round
                log.info("resource policy %s in %s not deleted yet: %s", policy.name, region, exc)
                continue
            log.info("deleted unused placement policy %s in %s", policy.name, region)
            deleted.append(policy.name)
            with self._lock:
                self._ready.discard((region, policy.name))
        return deleted
