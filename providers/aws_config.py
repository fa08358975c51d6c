"""Configuration of the AWS provider (``AwsProviderConfig``).

Everything the adapter needs to buy instances in an account: where (regions,
subnets per zone), how they boot (an AMI and spotfleet's own launch template, or
an existing launch template, e.g. from terraform), what they may do (security
groups, instance profile), where cloud events arrive (an SQS queue fed by
EventBridge) and how often prices are refreshed.

Design choice: ``extra="forbid"`` so a misspelt key in a config file is an error
at start-up, not a silently ignored setting. Whether a launch is possible at all
(an AMI or a launch template) is checked at launch time, not here, so that
read-only commands such as ``spotfleet offerings`` work with only a region.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class AwsProviderConfig(BaseModel):
    """Where and how spotfleet buys EC2 capacity. See ``docs/aws.md``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    regions: list[str] = Field(default_factory=lambda: ["us-east-1"], min_length=1)
    subnets: dict[str, list[str]] = Field(
        default_factory=dict,
        description=(
            "Subnet ids per zone, keyed by zone name (us-east-1a) or AZ id (use1-az1). "
            "Only zones listed here are offered when any subnet is configured for the "
            "region; with none, every zone is offered and the default VPC is used."
        ),
    )
    security_group_ids: list[str] = Field(default_factory=list)
    ami_id: str | None = None
    launch_template_name: str | None = Field(
        default=None,
        description=(
            "An existing launch template (e.g. created by terraform). spotfleet adds "
            "versions to it that carry each launch's user data and never changes its "
            "default version. Without it, spotfleet manages 'spotfleet-<cluster>' from ami_id."
        ),
    )
    instance_profile: str | None = Field(default=None, description="Instance profile name or ARN.")
    key_name: str | None = None
    root_volume_gib: int = Field(default=200, ge=8)
    root_device_name: str = "/dev/sda1"
    kms_key_id: str | None = None
    sqs_queue_url: str | None = None
    sqs_wait_seconds: int = Field(default=1, ge=0, le=20)
    sqs_max_batches: int = Field(default=5, ge=1, description="Receive calls per poll_events().")
    extra_tags: dict[str, str] = Field(default_factory=dict)
    endpoint_url: str | None = Field(default=None, description="Send every API call here (moto server, LocalStack).")
    price_refresh_interval_s: float = Field(default=300.0, gt=0)
    instance_type_refresh_interval_s: float = Field(default=86_400.0, gt=0)
    on_demand_price_source: Literal["pricing-api", "catalog"] = "pricing-api"
    instance_type_patterns: list[str] = Field(
        default_factory=lambda: ["p*", "g*"],
        description="DescribeInstanceTypes instance-type filter; NVIDIA GPU types are kept.",
    )
    architectures: list[str] = Field(
        default_factory=lambda: ["x86_64"],
        description="CPU architectures the AMI runs on; GPU types of other architectures (g5g: arm64) are left out.",
    )
    spot_allocation_strategy: Literal[
        "price-capacity-optimized", "capacity-optimized", "lowest-price", "diversified"
    ] = "price-capacity-optimized"
    retry_mode: Literal["standard", "adaptive"] = "adaptive"
    max_attempts: int = Field(default=5, ge=1, le=20)
    launch_template_versions_kept: int = Field(default=100, ge=5)

    @field_validator("extra_tags")
    @classmethod
    def _no_spotfleet_tags(cls, value: dict[str, str]) -> dict[str, str]:
        reserved = [k for k in value if k.startswith("spotfleet:") or k.startswith("aws:")]
        if reserved:
            raise ValueError(f"extra_tags may not set reserved keys: {sorted(reserved)}")
        return value

    def subnets_for(self, *, zone_name: str, zone_id: str) -> list[str]:
        """Subnets configured for one zone, whichever way the zone was named."""
        return [*self.subnets.get(zone_name, []), *self.subnets.get(zone_id, [])]
