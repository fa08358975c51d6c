"""Fixtures for the AWS provider tests: a real moto server over loopback HTTP.

moto serves EC2, SQS and EventBridge, but returns placeholder spot prices,
honours only the first CreateFleet override, ignores client tokens and never
runs out of capacity. The shims here fill those gaps at the botocore layer, so
the provider's own code path (serialisation, HTTP, parsing, pagination) is the
one production runs:

- ``CatalogPrices`` answers DescribeSpotPriceHistory (``before-send``, i.e. with
  a real EC2 XML body that botocore parses, paginated) with prices built from
  the bundled catalog, mapped from AZ ids to this moto account's zone names;
- ``FleetShim`` records every CreateFleet request as the provider built it,
  emulates stockouts per (instance type, zone) by removing those overrides
  before the call and adding the matching ``Errors`` entries after it, and
  injects whole-call errors (capacity, quota, throttling, permissions);
- ``PlacementGroupShim`` serves Create/Describe/DeletePlacementGroup (moto 5.2
  has no placement groups) as EC2 XML, with AWS's ``Duplicate`` and ``InUse``
  errors: a group is in use while moto holds a non-terminated instance tagged
  with it.
"""

from __future__ import annotations

import copy
import json
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qs

import boto3
from botocore.awsrequest import AWSResponse

from spotfleet.catalog import load_catalog
from spotfleet.model.offering import Market, Offering
from spotfleet.providers import aws_events
from spotfleet.providers.aws import AwsProvider, AwsProviderConfig
from spotfleet.providers.base import (
    TAG_JOB_IDS,
    TAG_REQUEST_ID,
    AgentBootstrap,
    LaunchRequest,
)

REGION = "us-east-1"
CLUSTER = "test-cluster"
AMI = "ami-12c6146b"  # one of moto's bundled images


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


def http_response(status: int, body: bytes = b"", content_type: str = "text/xml") -> AWSResponse:
    return AWSResponse("http://shim", status, {"Content-Type": content_type}, _Raw(body))


@dataclass
class CatalogPrices:
    """Realistic spot prices for DescribeSpotPriceHistory, served as EC2 XML.

    Each (type, zone) gets an older point at the catalog price and a newer one at
    ``LIVE_FACTOR`` × catalog, so a test can tell live prices from catalog ones
    and that the latest point wins. Pages hold ``page_size`` points.
    """

    zone_ids: dict[str, str]
    now: datetime
    page_size: int = 25
    calls: int = 0
    points: list[tuple[str, str, float, datetime]] = field(default_factory=list)

    LIVE_FACTOR = 0.9

    def __post_init__(self) -> None:
        zone_of = {v: k for k, v in self.zone_ids.items()}
        for o in load_catalog(("aws",)).spot():
            if o.region != REGION or o.zone not in zone_of:
                continue
            zone = zone_of[o.zone]
            newer = (
                o.instance_type,
                zone,
                round(o.price_per_hour * self.LIVE_FACTOR, 6),
                self.now - timedelta(hours=1),
            )
            older = (o.instance_type, zone, o.price_per_hour, self.now - timedelta(days=2))
            # Alternate the order so "latest wins" cannot rely on response order.
            self.points.extend([newer, older] if len(self.points) % 4 else [older, newer])

    def live_price(self, instance_type: str, zone: str) -> float | None:
        """The price the newest point says (what the provider must report)."""
        latest = max((p for p in self.points if p[:2] == (instance_type, zone)), key=lambda p: p[3], default=None)
        return latest[2] if latest else None

    def __call__(self, request: Any, **_: Any) -> AWSResponse:
        self.calls += 1
        form = parse_qs(request.body.decode() if isinstance(request.body, bytes) else request.body)
        wanted = {v[0] for k, v in form.items() if k.startswith("InstanceType.")}
        start = int(form.get("NextToken", ["0"])[0])
        matching = [p for p in self.points if not wanted or p[0] in wanted]
        page = matching[start : start + self.page_size]
        items = "".join(
            f"<item><instanceType>{t}</instanceType><productDescription>Linux/UNIX</productDescription>"
            f"<spotPrice>{p:.6f}</spotPrice><timestamp>{ts.strftime('%Y-%m-%dT%H:%M:%S.000Z')}</timestamp>"
            f"<availabilityZone>{z}</availabilityZone></item>"
            for t, z, p, ts in page
        )
        token = f"<nextToken>{start + self.page_size}</nextToken>" if start + self.page_size < len(matching) else ""
        body = (
            '<DescribeSpotPriceHistoryResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
            f"<requestId>shim</requestId><spotPriceHistorySet>{items}</spotPriceHistorySet>{token}"
            "</DescribeSpotPriceHistoryResponse>"
        )
        return http_response(200, body.encode())


@dataclass
class FleetShim:
    """Records CreateFleet requests; emulates stockouts and injects errors."""

    subnet_zone: dict[str, str]
    requests: list[dict[str, Any]] = field(default_factory=list)
    stocked_out: dict[tuple[str, str], str] = field(default_factory=dict)  # (type, zone) → error code
    capacity_limit: int | None = None  # at most this many instances per call (partial fulfilment)
    next_error: tuple[int, str, str] | None = None  # (HTTP status, code, message), once
    _removed: list[tuple[dict[str, Any], str, str]] = field(default_factory=list)
    _removed_all: bool = False

    def install(self, session: boto3.Session) -> FleetShim:
        session.events.register("before-parameter-build.ec2.CreateFleet", self._before_build)
        session.events.register("before-call.ec2.CreateFleet", self._before_call)
        session.events.register("after-call.ec2.CreateFleet", self._after_call)
        return self

    def _zone(self, override: dict[str, Any]) -> str:
        """The override's zone; "" when the template's network interfaces carry the subnet."""
        return str(override.get("AvailabilityZone") or self.subnet_zone.get(override.get("SubnetId", ""), ""))

    def _before_build(self, params: dict[str, Any], **_: Any) -> None:
        self.requests.append(copy.deepcopy(params))
        self._removed = []
        lifecycle = params["TargetCapacitySpecification"]["DefaultTargetCapacityType"]
        for config in params.get("LaunchTemplateConfigs", []):
            kept = []
            for override in config.get("Overrides", []):
                code = self.stocked_out.get((override["InstanceType"], self._zone(override)))
                if code is not None:
                    lto = {"LaunchTemplateSpecification": config["LaunchTemplateSpecification"], "Overrides": override}
                    self._removed.append((lto, lifecycle, code))
                else:
                    kept.append(override)
            config["Overrides"] = kept
        target = params["TargetCapacitySpecification"]
        if self.capacity_limit is not None and target["TotalTargetCapacity"] > self.capacity_limit:
            for key in ("TotalTargetCapacity", "SpotTargetCapacity", "OnDemandTargetCapacity"):
                if key in target:
                    target[key] = self.capacity_limit

    def _errors(self) -> list[dict[str, Any]]:
        return [
            {
                "LaunchTemplateAndOverrides": lto,
                "Lifecycle": lifecycle,
                "ErrorCode": code,
                "ErrorMessage": f"{code}: no {lifecycle} capacity for this override (injected by the test)",
            }
            for lto, lifecycle, code in self._removed
        ]

    def _before_call(self, params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        if self.next_error is not None:
            status, code, message = self.next_error
            self.next_error = None
            return http_response(status), {
                "Error": {"Code": code, "Message": message},
                "ResponseMetadata": {"HTTPStatusCode": status},
            }
        body = params.get("body") or {}
        has_override = any(".Overrides." in k for k in body)
        if self._removed and not has_override:  # every override stocked out
            self._removed_all = True
            return http_response(200), {
                "FleetId": "fleet-00000000-0000-0000-0000-stockout0000",
                "Errors": self._errors(),
                "Instances": [],
                "ResponseMetadata": {"HTTPStatusCode": 200},
            }
        return None

    def _after_call(self, parsed: dict[str, Any], http_response: AWSResponse, **_: Any) -> None:
        if http_response.status_code < 300 and self._removed and not self._removed_all:
            parsed.setdefault("Errors", []).extend(self._errors())
        self._removed = []
        self._removed_all = False

    @property
    def last(self) -> dict[str, Any]:
        return self.requests[-1]


def ec2_error(code: str, message: str, status: int = 400) -> AWSResponse:
    body = (
        f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors>"
        "<RequestID>shim</RequestID></Response>"
    )
    return http_response(status, body.encode())


@dataclass
class PlacementGroupShim:
    """Placement groups as EC2 serves them (moto has none): name → (strategy, tags)."""

    moto_ec2: Any
    groups: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)
    created: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    def install(self, session: boto3.Session) -> PlacementGroupShim:
        session.events.register("before-send.ec2.CreatePlacementGroup", self._create)
        session.events.register("before-send.ec2.DescribePlacementGroups", self._describe)
        session.events.register("before-send.ec2.DeletePlacementGroup", self._delete)
        return self

    @staticmethod
    def _form(request: Any) -> dict[str, str]:
        body = request.body.decode() if isinstance(request.body, bytes) else request.body
        return {k: v[0] for k, v in parse_qs(body).items()}

    @staticmethod
    def _ok(operation: str, inner: str = "<return>true</return>") -> AWSResponse:
        body = (
            f'<{operation}Response xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
            f"<requestId>shim</requestId>{inner}</{operation}Response>"
        )
        return http_response(200, body.encode())

    def _item(self, name: str) -> str:
        strategy, tags = self.groups[name]
        tag_xml = "".join(f"<item><key>{k}</key><value>{v}</value></item>" for k, v in tags.items())
        return (
            f"<item><groupName>{name}</groupName><strategy>{strategy}</strategy><state>available</state>"
            f"<groupId>pg-{abs(hash(name)) % 10**12:012d}</groupId><tagSet>{tag_xml}</tagSet></item>"
        )

    def _create(self, request: Any, **_: Any) -> AWSResponse:
        form = self._form(request)
        name = form["GroupName"]
        if name in self.groups:
            return ec2_error("InvalidPlacementGroup.Duplicate", f"The placement group '{name}' already exists.")
        tags: dict[str, str] = {}
        for key, value in form.items():
            if key.startswith("TagSpecification.1.Tag.") and key.endswith(".Key"):
                tags[value] = form[key[: -len("Key")] + "Value"]
        self.groups[name] = (form.get("Strategy", ""), tags)
        self.created.append(name)
        return self._ok("CreatePlacementGroup", f"<placementGroup>{self._item(name)}</placementGroup>")

    def _describe(self, request: Any, **_: Any) -> AWSResponse:
        form = self._form(request)
        names = [v for k, v in form.items() if k.startswith("GroupName.")]
        wanted = names or sorted(self.groups)
        unknown = [n for n in wanted if n not in self.groups]
        if unknown:
            return ec2_error("InvalidPlacementGroup.Unknown", f"The Placement Group '{unknown[0]}' is unknown.")
        tag_filter = {
            form[k][len("tag:") :]: form[k.replace(".Name", ".Value.1")]
            for k in form
            if k.startswith("Filter.") and k.endswith(".Name") and form[k].startswith("tag:")
        }
        chosen = [n for n in wanted if all(self.groups[n][1].get(k) == v for k, v in tag_filter.items())]
        items = "".join(self._item(n) for n in chosen)
        return self._ok("DescribePlacementGroups", f"<placementGroupSet>{items}</placementGroupSet>")

    def _delete(self, request: Any, **_: Any) -> AWSResponse:
        name = self._form(request)["GroupName"]
        if name not in self.groups:
            return ec2_error("InvalidPlacementGroup.Unknown", f"The Placement Group '{name}' is unknown.")
        if self.members(name):
            return ec2_error("InvalidPlacementGroup.InUse", f"The placement group '{name}' is in use.")
        del self.groups[name]
        self.deleted.append(name)
        return self._ok("DeletePlacementGroup")

    def members(self, name: str) -> list[str]:
        """Non-terminated instances moto holds that were launched into this group."""
        pages = self.moto_ec2.describe_instances(Filters=[{"Name": "tag:spotfleet:placement-group", "Values": [name]}])
        return [
            i["InstanceId"] for r in pages["Reservations"] for i in r["Instances"] if i["State"]["Name"] != "terminated"
        ]


def make_config(moto: str, *, subnets: dict[str, list[str]] | None = None, **overrides: Any) -> AwsProviderConfig:
    fields: dict[str, Any] = {
        "regions": [REGION],
        "endpoint_url": moto,
        "ami_id": AMI,
        "subnets": subnets or {},
        "on_demand_price_source": "catalog",
        "retry_mode": "standard",
        "max_attempts": 2,
        "sqs_wait_seconds": 0,
        "extra_tags": {"team": "ml-platform"},
    }
    fields.update(overrides)
    return AwsProviderConfig(**fields)


def eventbridge_event(
    detail_type: str, detail: dict[str, Any], *, source: str = "aws.ec2", resources: list[str] | None = None
) -> dict[str, Any]:
    return {"Source": source, "DetailType": detail_type, "Detail": json.dumps(detail), "Resources": resources or []}


SPOT = Market.SPOT


BOOT = AgentBootstrap(
    controller_url="http://controller.internal:8080",
    agent_token="s3cret-token",
    spotfleet_version="0.1.0",
    cluster=CLUSTER,
)


def pick(provider: AwsProvider, instance_type: str, market: Market = Market.SPOT) -> list[Offering]:
    found = [o for o in provider.offerings().market(market) if o.instance_type == instance_type]
    return sorted(found, key=lambda o: o.zone)


def request(
    request_id: str, offerings: Sequence[Offering], *, count: int = 1, placement_group: str | None = None
) -> LaunchRequest:
    return LaunchRequest(
        request_id=request_id,
        offering=offerings[0],
        alternatives=tuple(offerings[1:]),
        bootstrap=BOOT,
        tags={TAG_JOB_IDS: "job-1,job-2"},
        count=count,
        placement_group=placement_group,
    )


def tagged_instances(ec2: Any, request_id: str) -> list[dict[str, Any]]:
    pages = ec2.describe_instances(Filters=[{"Name": f"tag:{TAG_REQUEST_ID}", "Values": [request_id]}])
    return [i for r in pages["Reservations"] for i in r["Instances"]]


def run_foreign(ec2: Any, *, tags: dict[str, str] | None = None) -> str:
    """An instance spotfleet did not launch (untagged, or another cluster's)."""
    kwargs: dict[str, Any] = {"ImageId": AMI, "MinCount": 1, "MaxCount": 1, "InstanceType": "g5.xlarge"}
    if tags:
        kwargs["TagSpecifications"] = [
            {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        ]
    return str(ec2.run_instances(**kwargs)["Instances"][0]["InstanceId"])


# The EventBridge rule the terraform module creates (source/detail-type filter).
RULE_PATTERN = {
    "source": ["aws.ec2", "aws.health"],
    "detail-type": [aws_events.SPOT_WARNING, aws_events.REBALANCE, aws_events.STATE_CHANGE, aws_events.HEALTH],
}
