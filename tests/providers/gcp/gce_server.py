"""A small Compute Engine v1 REST server for tests (loopback, threads, no deps).

It speaks the subset of the API the GCP provider uses, in the real wire shape,
so the real ``google-cloud-compute`` client can talk to it over HTTP:

- ``instances``: insert (``requestId`` idempotent), get, list (``filter``,
  ``maxResults``, ``pageToken``), delete, bulkInsert (``count``, ``minCount``,
  ``namePattern``);
- ``zoneOperations``: get, wait, list (``filter``);
- ``machineTypes`` and ``acceleratorTypes``: list.

Ids are uint64 decimal strings, long-running calls return ``Operation`` objects
(``compute#operation``) and errors use the Google JSON error envelope
(``{"error": {"code", "message", "errors": [{"reason", ...}]}}``).

Tests steer it through ``FakeCompute``: mark a zone stocked out (answered as an
HTTP 503 at insert time, or as a DONE operation carrying
``ZONE_RESOURCE_POOL_EXHAUSTED`` as the real API usually does), inject the next
error for a method (quota, 429, 404), keep operations RUNNING for a few polls,
or preempt an instance (a ``compute.instances.preempted`` operation, then the
instance's termination action). Every request is recorded in ``calls``.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

API = "https://www.googleapis.com/compute/v1"

# (guestCpus, memoryMb, accelerators) of the machine types the tests use.
MACHINE_TYPES: dict[str, tuple[int, int, list[dict[str, Any]]]] = {
    "a2-highgpu-1g": (
        12,
        87040,
        [{"guestAcceleratorType": "nvidia-tesla-a100", "guestAcceleratorCount": 1}],
    ),
    "a2-highgpu-8g": (
        96,
        696320,
        [{"guestAcceleratorType": "nvidia-tesla-a100", "guestAcceleratorCount": 8}],
    ),
    "a3-highgpu-8g": (
        208,
        1916928,
        [{"guestAcceleratorType": "nvidia-h100-80gb", "guestAcceleratorCount": 8}],
    ),
    "g2-standard-4": (
        4,
        16384,
        [{"guestAcceleratorType": "nvidia-l4", "guestAcceleratorCount": 1}],
    ),
    "g2-standard-8": (
        8,
        32768,
        [{"guestAcceleratorType": "nvidia-l4", "guestAcceleratorCount": 1}],
    ),
    "n1-standard-8": (8, 30720, []),
    "e2-standard-4": (4, 16384, []),
}
ACCELERATOR_TYPES = ("nvidia-tesla-t4", "nvidia-l4", "nvidia-tesla-a100", "nvidia-h100-80gb")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class ApiError(Exception):
    """An error the server answers in Google's JSON error envelope."""

    def __init__(self, status: int, reason: str, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status, self.reason, self.message, self.retry_after = (
            status,
            reason,
            message,
            retry_after,
        )

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "code": self.status,
                "message": self.message,
                "errors": [{"message": self.message, "domain": "global", "reason": self.reason}],
            }
        }


STOCKOUT = (
    "ZONE_RESOURCE_POOL_EXHAUSTED",
    503,
    "The zone does not have enough resources available to fulfill the request. Try a different zone, or try again later.",
)
QUOTA = ("QUOTA_EXCEEDED", 403, "Quota 'GPUS_ALL_REGIONS' exceeded. Limit: 0.0 globally.")


def stockout_error() -> ApiError:
    return ApiError(STOCKOUT[1], STOCKOUT[0], STOCKOUT[2])


def quota_error() -> ApiError:
    return ApiError(QUOTA[1], QUOTA[0], QUOTA[2])


def throttle_error(retry_after: int = 7) -> ApiError:
    return ApiError(429, "rateLimitExceeded", "Rate Limit Exceeded", retry_after=retry_after)


# --- list filters ---------------------------------------------------------------

_CLAUSE = re.compile(r'^\(?\s*([A-Za-z][\w.\-]*)\s*(=|!=)\s*(?:"([^"]*)"|([\w.\-]+))\s*\)?$')


def parse_filter(text: str) -> list[tuple[str, str, str]]:
    """``a = "x" AND (b != y)`` → clauses; anything else is a 400 like the real API."""
    if not text.strip():
        return []
    clauses = []
    for part in re.split(r"\s+AND\s+", text.strip()):
        m = _CLAUSE.match(part.strip())
        if not m:
            raise ApiError(
                400,
                "invalid",
                f"Invalid value for field 'filter': '{text}'. Invalid list filter expression.",
            )
        clauses.append((m.group(1), m.group(2), m.group(3) if m.group(3) is not None else m.group(4)))
    return clauses


def _lookup(resource: dict[str, Any], path: str) -> Any:
    value: Any = resource
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def matches(resource: dict[str, Any], clauses: list[tuple[str, str, str]]) -> bool:
    for path, op, want in clauses:
        got = _lookup(resource, path)
        got_text = None if got is None else str(got)
        if (op == "=") != (got_text == want):
            return False
    return True


# --- state ------------------------------------------------------------------------


@dataclass
class Call:
    method: str
    path: str
    query: dict[str, str]
    body: dict[str, Any] | None


@dataclass
class FakeCompute:
    """The emulated project: zones, instances, operations and injected faults."""

    project: str = "test-project"
    zones: tuple[str, ...] = ("us-central1-a", "us-central1-b", "us-east4-a")
    machine_types: dict[str, tuple[str, ...]] = field(default_factory=dict)  # zone -> names
    accelerator_types: dict[str, tuple[str, ...]] = field(default_factory=dict)
    page_size: int = 500
    stockout_zones: dict[str, str] = field(default_factory=dict)  # zone -> "http" | "operation"
    operation_polls_before_done: int = 0
    stale_lists: int = 0  # the next N instances.list calls see no instances (eventual consistency)
    instances: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    resource_policies: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (region, name)
    operations: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    _faults: dict[str, list[ApiError | tuple[str, int, str]]] = field(default_factory=dict)
    _request_ids: dict[str, tuple[str, str]] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(7_331_234_567_890_123_456))
    _polls: dict[tuple[str, str], int] = field(default_factory=dict)
    _pending_errors: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)

    # -- test controls --

    def fail_next(self, method: str, error: ApiError | tuple[str, int, str]) -> None:
        """Answer the next ``method`` call (``instances.insert``...) with ``error``.

        An ``ApiError`` is an HTTP error; a ``(code, http_status, message)`` tuple
        is a DONE operation carrying that error (how GCE reports most failures).
        """
        with self.lock:
            self._faults.setdefault(method, []).append(error)

    def stockout(self, zone: str, *, how: str = "operation") -> None:
        with self.lock:
            self.stockout_zones[zone] = how

    def preempt(self, zone: str, name: str) -> dict[str, Any]:
        """Preempt a Spot VM: record the operation, then apply its termination action."""
        with self.lock:
            inst = self.instances[(zone, name)]
            op = self._operation(zone, "compute.instances.preempted", inst, user="system")
            action = inst.get("scheduling", {}).get("instanceTerminationAction", "STOP")
            if action == "DELETE":
                del self.instances[(zone, name)]
            else:
                inst["status"] = "TERMINATED"
                inst["lastStopTimestamp"] = _now()
            return op

    def set_status(self, zone: str, name: str, status: str) -> None:
        with self.lock:
            self.instances[(zone, name)]["status"] = status

    def add_foreign_instance(self, zone: str, name: str, *, labels: dict[str, str] | None = None) -> None:
        """An instance spotfleet did not create (the provider must refuse to touch it)."""
        with self.lock:
            self._create(
                zone,
                {
                    "name": name,
                    "machineType": f"zones/{zone}/machineTypes/e2-standard-4",
                    "labels": labels or {},
                },
            )

    def running(self) -> list[dict[str, Any]]:
        with self.lock:
            return [i for i in self.instances.values() if i["status"] != "TERMINATED"]

    def calls_to(self, method: str, path_suffix: str = "") -> list[Call]:
        return [c for c in self.calls if c.method == method and c.path.endswith(path_suffix)]

    # -- internals --

    def _next_id(self) -> str:
        return str(next(self._ids))

    def _link(self, zone: str, kind: str = "", name: str = "") -> str:
        base = f"{API}/projects/{self.project}/zones/{zone}"
        return f"{base}/{kind}/{name}" if kind else base

    def _operation(
        self,
        zone: str,
        op_type: str,
        target: dict[str, Any] | None,
        *,
        error: tuple[str, int, str] | None = None,
        user: str = "spotfleet@test-project.iam.gserviceaccount.com",
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        name = f"operation-{self._next_id()}-{op_type.rsplit('.', 1)[-1]}"
        op: dict[str, Any] = {
            "kind": "compute#operation",
            "id": self._next_id(),
            "name": name,
            "zone": self._link(zone),
            "operationType": op_type,
            "targetLink": target["selfLink"] if target else self._link(zone, "instances", ""),
            "targetId": target["id"] if target else "0",
            "status": "PENDING" if self.operation_polls_before_done else "DONE",
            "user": user,
            "progress": 0 if self.operation_polls_before_done else 100,
            "insertTime": _now(),
            "startTime": _now(),
            "selfLink": self._link(zone, "operations", name),
        }
        if not self.operation_polls_before_done:
            op["endTime"] = _now()
        if error:  # reported when the operation is DONE, as on GCE
            self._pending_errors[(zone, name)] = {
                "error": {"errors": [{"code": error[0], "message": error[2]}]},
                "httpErrorStatusCode": error[1],
                "httpErrorMessage": "SERVICE UNAVAILABLE" if error[1] == 503 else "FORBIDDEN",
            }
        op.update(extra or {})
        self.operations[(zone, name)] = op
        if op["status"] == "DONE":
            op.update(self._pending_errors.pop((zone, name), {}))
        return op

    def _attach_policies(self, zone: str, body: dict[str, Any]) -> list[str]:
        """An insert's ``resourcePolicies`` (URLs or names) → full URLs; 400 for an unknown one.

        Like GCE: the policy must exist in the zone's region; a stored instance
        lists its policies as full URLs.
        """
        region = zone.rsplit("-", 1)[0]
        urls = []
        for n, ref in enumerate(body.get("resourcePolicies") or []):
            name = str(ref).rsplit("/", 1)[-1]
            if (region, name) not in self.resource_policies or (
                "/regions/" in ref and f"/regions/{region}/" not in ref
            ):
                raise ApiError(
                    400,
                    "invalid",
                    f"Invalid value for field 'resource.resourcePolicies[{n}]': '{ref}'. "
                    "The resource policy does not exist in the instance's region.",
                )
            urls.append(self.resource_policies[(region, name)]["selfLink"])
        return urls

    def policy_users(self, region: str, name: str) -> list[str]:
        """Instances (any status: a stopped VM keeps its policies) that reference a policy."""
        link = f"{API}/projects/{self.project}/regions/{region}/resourcePolicies/{name}"
        return [i["name"] for i in self.instances.values() if link in (i.get("resourcePolicies") or [])]

    def _create(self, zone: str, body: dict[str, Any]) -> dict[str, Any]:
        name = body["name"]
        policies = self._attach_policies(zone, body)
        inst = json.loads(json.dumps(body))
        if policies:
            inst["resourcePolicies"] = policies
        inst.update(
            {
                "kind": "compute#instance",
                "id": self._next_id(),
                "status": "RUNNING",
                "zone": self._link(zone),
                "selfLink": self._link(zone, "instances", name),
                "creationTimestamp": _now(),
                "machineType": self._link(zone, "machineTypes", body["machineType"].rsplit("/", 1)[-1]),
                "labelFingerprint": "42WmSpB8rSM=",
                "fingerprint": "x4ZCszmLxPk=",
            }
        )
        for n, nic in enumerate(inst.get("networkInterfaces") or [{}]):
            nic.setdefault("name", f"nic{n}")
            nic["networkIP"] = f"10.128.0.{len(self.instances) + 2}"
        inst.setdefault(
            "networkInterfaces",
            [{"name": "nic0", "networkIP": f"10.128.0.{len(self.instances) + 2}"}],
        )
        self.instances[(zone, name)] = inst
        return inst

    def _take_fault(self, method: str) -> ApiError | tuple[str, int, str] | None:
        queue = self._faults.get(method)
        return queue.pop(0) if queue else None

    def _check_zone(self, zone: str) -> None:
        if zone not in self.zones:
            raise self._not_found(f"zones/{zone}")

    def _paginate(self, kind: str, items: list[dict[str, Any]], query: dict[str, str], zone: str) -> dict[str, Any]:
        size = min(int(query.get("maxResults", 500)), self.page_size)
        start = int(query.get("pageToken") or 0)
        page = items[start : start + size]
        out: dict[str, Any] = {
            "kind": kind,
            "id": f"projects/{self.project}/zones/{zone}",
            "items": page,
            "selfLink": self._link(zone),
        }
        if start + size < len(items):
            out["nextPageToken"] = str(start + size)
        return out

    # -- handlers (called with the lock held) --

    def insert(self, zone: str, query: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
        self._check_zone(zone)
        rid = query.get("requestId")
        if rid and rid in self._request_ids:
            return self.operations[self._request_ids[rid]]
        fault = self._take_fault("instances.insert")
        if isinstance(fault, ApiError):
            raise fault
        how = self.stockout_zones.get(zone)
        if how == "http":
            raise stockout_error()
        if (zone, body["name"]) in self.instances:
            raise ApiError(
                409,
                "alreadyExists",
                f"The resource 'projects/{self.project}/zones/{zone}/instances/{body['name']}' already exists",
            )
        self._validate_machine_type(zone, body["machineType"])
        self._attach_policies(zone, body)
        error = fault if isinstance(fault, tuple) else (STOCKOUT if how == "operation" else None)
        if error:
            target = {
                "selfLink": self._link(zone, "instances", body["name"]),
                "id": self._next_id(),
            }
            op = self._operation(zone, "insert", target, error=error)
        else:
            op = self._operation(zone, "insert", self._create(zone, body))
        if rid:
            self._request_ids[rid] = (zone, op["name"])
        return op

    def bulk_insert(self, zone: str, query: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
        self._check_zone(zone)
        rid = query.get("requestId")
        if rid and rid in self._request_ids:
            return self.operations[self._request_ids[rid]]
        fault = self._take_fault("instances.bulkInsert")
        if isinstance(fault, ApiError):
            raise fault
        how = self.stockout_zones.get(zone)
        if how == "http":
            raise stockout_error()
        props = body["instanceProperties"]
        self._validate_machine_type(zone, props["machineType"])
        count, pattern = int(body["count"]), body["namePattern"]
        width = pattern.count("#")
        error = fault if isinstance(fault, tuple) else (STOCKOUT if how == "operation" else None)
        created = 0
        if not error:
            for n in range(1, count + 1):
                name = pattern.replace("#" * width, str(n).zfill(width))
                if (zone, name) not in self.instances:
                    self._create(zone, {**props, "name": name})
                    created += 1
        meta = {
            "instancesBulkInsertOperationMetadata": {
                "perLocationStatus": {
                    f"zones/{zone}": {
                        "status": "DONE" if not error else "FAILED",
                        "createdVmCount": created,
                        "targetVmCount": count,
                    }
                }
            }
        }
        op = self._operation(zone, "bulkInsert", None, error=error, extra=meta)
        if rid:
            self._request_ids[rid] = (zone, op["name"])
        return op

    def _validate_machine_type(self, zone: str, url: str) -> None:
        name = url.rsplit("/", 1)[-1]
        if name not in self.machine_types.get(zone, tuple(MACHINE_TYPES)):
            raise ApiError(
                400,
                "invalid",
                f"Invalid value for field 'resource.machineType': '{url}'. Machine type with name '{name}' does not exist in zone '{zone}'.",
            )

    def get(self, zone: str, name: str) -> dict[str, Any]:
        self._check_zone(zone)
        fault = self._take_fault("instances.get")
        if isinstance(fault, ApiError):
            raise fault
        inst = self.instances.get((zone, name))
        if inst is None:
            raise self._not_found(f"zones/{zone}/instances/{name}")
        return inst

    def list(self, zone: str, query: dict[str, str]) -> dict[str, Any]:
        self._check_zone(zone)
        fault = self._take_fault("instances.list")
        if isinstance(fault, ApiError):
            raise fault
        clauses = parse_filter(query.get("filter", ""))
        if self.stale_lists > 0:
            self.stale_lists -= 1
            return self._paginate("compute#instanceList", [], query, zone)
        items = [i for (z, _), i in sorted(self.instances.items()) if z == zone and matches(i, clauses)]
        return self._paginate("compute#instanceList", items, query, zone)

    def delete(self, zone: str, name: str, query: dict[str, str]) -> dict[str, Any]:
        inst = self.get(zone, name)
        fault = self._take_fault("instances.delete")
        if isinstance(fault, ApiError):
            raise fault
        del self.instances[(zone, name)]
        return self._operation(zone, "delete", inst)

    def op_get(self, zone: str, name: str, *, wait: bool) -> dict[str, Any]:
        self._check_zone(zone)
        op = self.operations.get((zone, name))
        if op is None:
            raise self._not_found(f"zones/{zone}/operations/{name}")
        polls = self._polls.get((zone, name), 0) + 1
        self._polls[(zone, name)] = polls
        if op["status"] != "DONE" and polls >= self.operation_polls_before_done:
            op.update({"status": "DONE", "progress": 100, "endTime": _now()})
            op.update(self._pending_errors.pop((zone, name), {}))
        elif op["status"] == "PENDING":
            op["status"] = "RUNNING"
        return op

    # -- regional: resource policies and their operations --

    def _region_link(self, region: str, kind: str = "", name: str = "") -> str:
        base = f"{API}/projects/{self.project}/regions/{region}"
        return f"{base}/{kind}/{name}" if kind else base

    def _region_operation(self, region: str, op_type: str, target: dict[str, Any]) -> dict[str, Any]:
        name = f"operation-{self._next_id()}-{op_type}"
        op = {
            "kind": "compute#operation",
            "id": self._next_id(),
            "name": name,
            "region": self._region_link(region),
            "operationType": op_type,
            "targetLink": target["selfLink"],
            "targetId": target["id"],
            "status": "DONE",
            "progress": 100,
            "insertTime": _now(),
            "startTime": _now(),
            "endTime": _now(),
            "selfLink": self._region_link(region, "operations", name),
        }
        self.operations[(f"regions/{region}", name)] = op
        return op

    def _not_found(self, path: str) -> ApiError:
        """GCE's 404 for a resource of this project (``path`` below ``projects/<p>/``)."""
        return ApiError(404, "notFound", f"The resource 'projects/{self.project}/{path}' was not found")

    def _check_region(self, region: str) -> None:
        if not any(z.rsplit("-", 1)[0] == region for z in self.zones):
            raise self._not_found(f"regions/{region}")

    def policy_insert(self, region: str, query: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
        self._check_region(region)
        rid = query.get("requestId")
        if rid and rid in self._request_ids:
            return self.operations[self._request_ids[rid]]
        name = body["name"]
        if (region, name) in self.resource_policies:
            raise ApiError(
                409,
                "alreadyExists",
                f"The resource 'projects/{self.project}/regions/{region}/resourcePolicies/{name}' already exists",
            )
        if not re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", name):
            raise ApiError(400, "invalid", f"Invalid value for field 'resource.name': '{name}'.")
        policy = {
            **json.loads(json.dumps(body)),
            "kind": "compute#resourcePolicy",
            "id": self._next_id(),
            "region": self._region_link(region),
            "selfLink": self._region_link(region, "resourcePolicies", name),
            "creationTimestamp": _now(),
            "status": "READY",
        }
        self.resource_policies[(region, name)] = policy
        op = self._region_operation(region, "insert", policy)
        if rid:
            self._request_ids[rid] = (f"regions/{region}", op["name"])
        return op

    def policy_get(self, region: str, name: str) -> dict[str, Any]:
        self._check_region(region)
        policy = self.resource_policies.get((region, name))
        if policy is None:
            raise self._not_found(f"regions/{region}/resourcePolicies/{name}")
        return policy

    def policy_list(self, region: str, query: dict[str, str]) -> dict[str, Any]:
        self._check_region(region)
        clauses = parse_filter(query.get("filter", ""))
        items = [p for (r, _), p in sorted(self.resource_policies.items()) if r == region and matches(p, clauses)]
        out = self._paginate("compute#resourcePolicyList", items, query, region)
        out["selfLink"] = self._region_link(region, "resourcePolicies")
        return out

    def policy_delete(self, region: str, name: str) -> dict[str, Any]:
        policy = self.policy_get(region, name)
        users = self.policy_users(region, name)
        if users:
            raise ApiError(
                400,
                "resourceInUseByAnotherResource",
                f"The resource_policy resource '{policy['selfLink']}' is already being used by "
                f"'projects/{self.project}/zones/.../instances/{users[0]}'",
            )
        del self.resource_policies[(region, name)]
        return self._region_operation(region, "delete", policy)

    def region_op_get(self, region: str, name: str) -> dict[str, Any]:
        op = self.operations.get((f"regions/{region}", name))
        if op is None:
            raise ApiError(404, "notFound", f"operation {name} not found in {region}")
        return op

    def op_list(self, zone: str, query: dict[str, str]) -> dict[str, Any]:
        self._check_zone(zone)
        clauses = parse_filter(query.get("filter", ""))
        items = [o for (z, _), o in self.operations.items() if z == zone and matches(o, clauses)]
        return self._paginate("compute#operationList", items, query, zone)

    def machine_type_list(self, zone: str, query: dict[str, str]) -> dict[str, Any]:
        self._check_zone(zone)
        items = []
        for name in self.machine_types.get(zone, tuple(MACHINE_TYPES)):
            cpus, mem, accels = MACHINE_TYPES[name]
            items.append(
                {
                    "kind": "compute#machineType",
                    "id": self._next_id(),
                    "name": name,
                    "guestCpus": cpus,
                    "memoryMb": mem,
                    "accelerators": accels,
                    "zone": zone,
                    "selfLink": self._link(zone, "machineTypes", name),
                }
            )
        return self._paginate("compute#machineTypeList", items, query, zone)

    def accelerator_type_list(self, zone: str, query: dict[str, str]) -> dict[str, Any]:
        self._check_zone(zone)
        items = [
            {
                "kind": "compute#acceleratorType",
                "id": self._next_id(),
                "name": name,
                "maximumCardsPerInstance": 8,
                "zone": self._link(zone),
                "selfLink": self._link(zone, "acceleratorTypes", name),
            }
            for name in self.accelerator_types.get(zone, ACCELERATOR_TYPES)
        ]
        return self._paginate("compute#acceleratorTypeList", items, query, zone)


# --- HTTP -------------------------------------------------------------------------

_ZONE = r"^/compute/v1/projects/(?P<project>[^/]+)/zones/(?P<zone>[^/]+)"
ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    ("POST", re.compile(_ZONE + r"/instances/bulkInsert$"), "bulk_insert"),
    ("POST", re.compile(_ZONE + r"/instances$"), "insert"),
    ("GET", re.compile(_ZONE + r"/instances$"), "list"),
    ("GET", re.compile(_ZONE + r"/instances/(?P<name>[^/]+)$"), "get"),
    ("DELETE", re.compile(_ZONE + r"/instances/(?P<name>[^/]+)$"), "delete"),
    ("GET", re.compile(_ZONE + r"/operations$"), "op_list"),
    ("GET", re.compile(_ZONE + r"/operations/(?P<name>[^/]+)$"), "op_get"),
    ("POST", re.compile(_ZONE + r"/operations/(?P<name>[^/]+)/wait$"), "op_wait"),
    ("GET", re.compile(_ZONE + r"/machineTypes$"), "machine_type_list"),
    ("GET", re.compile(_ZONE + r"/acceleratorTypes$"), "accelerator_type_list"),
]
_REGION = r"^/compute/v1/projects/(?P<project>[^/]+)/regions/(?P<region>[^/]+)"
REGION_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    ("POST", re.compile(_REGION + r"/resourcePolicies$"), "policy_insert"),
    ("GET", re.compile(_REGION + r"/resourcePolicies$"), "policy_list"),
    ("GET", re.compile(_REGION + r"/resourcePolicies/(?P<name>[^/]+)$"), "policy_get"),
    ("DELETE", re.compile(_REGION + r"/resourcePolicies/(?P<name>[^/]+)$"), "policy_delete"),
    ("GET", re.compile(_REGION + r"/operations/(?P<name>[^/]+)$"), "region_op_get"),
    ("POST", re.compile(_REGION + r"/operations/(?P<name>[^/]+)/wait$"), "region_op_get"),
]


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        compute = self.server.compute
        try:
            with compute.lock:
                compute.calls.append(Call(method, url.path, query, body))
                for verb, pattern, handler in REGION_ROUTES:
                    m = pattern.match(url.path) if verb == method else None
                    if m is None:
                        continue
                    if m["project"] != compute.project:
                        raise ApiError(403, "forbidden", f"Required 'compute' permission for 'projects/{m['project']}'")
                    region = m["region"]
                    if handler == "policy_insert":
                        result = compute.policy_insert(region, query, body or {})
                    elif handler == "policy_list":
                        result = compute.policy_list(region, query)
                    else:
                        result = getattr(compute, handler)(region, m["name"])
                    self._send(200, result)
                    return
                for verb, pattern, handler in ROUTES:
                    m = pattern.match(url.path) if verb == method else None
                    if m is None:
                        continue
                    if m["project"] != compute.project:
                        raise ApiError(
                            403,
                            "forbidden",
                            f"Required 'compute' permission for 'projects/{m['project']}'",
                        )
                    zone = m["zone"]
                    if handler in ("insert", "bulk_insert"):
                        result = getattr(compute, handler)(zone, query, body or {})
                    elif handler in (
                        "list",
                        "op_list",
                        "machine_type_list",
                        "accelerator_type_list",
                    ):
                        result = getattr(compute, handler)(zone, query)
                    elif handler == "get":
                        result = compute.get(zone, m["name"])
                    elif handler == "delete":
                        result = compute.delete(zone, m["name"], query)
                    else:
                        result = compute.op_get(zone, m["name"], wait=handler == "op_wait")
                    self._send(200, result)
                    return
                raise ApiError(404, "notFound", f"no route for {method} {url.path}")
        except ApiError as err:
            headers = {"Retry-After": str(err.retry_after)} if err.retry_after else {}
            self._send(err.status, err.body(), headers)

    def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    compute: FakeCompute


class ComputeServer:
    """Runs a ``FakeCompute`` on a free loopback port in a background thread."""

    def __init__(self, compute: FakeCompute | None = None) -> None:
        self.compute = compute or FakeCompute()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.compute = self.compute
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="gce-server",
            daemon=True,
        )

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> ComputeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
