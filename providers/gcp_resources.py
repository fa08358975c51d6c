"""Build Compute Engine instance resources and read them back.

One function builds the fields shared by ``instances.insert`` (an ``Instance``,
whose references are zonal partial URLs) and ``instances.bulkInsert`` (an
``InstanceProperties``, whose references are bare names), so a single VM and a
bulk of them come up identically:

- Spot scheduling: ``provisioningModel=SPOT``, ``instanceTerminationAction``
  from config, ``onHostMaintenance=TERMINATE`` (GPUs cannot live-migrate),
  ``automaticRestart=false``, optional ``maxRunDuration``;
- N1 shapes get ``guestAccelerators``; A2/A3/G2 carry their GPUs in the type;
- Shielded VM (vTPM, integrity monitoring, Secure Boot unless disabled);
- metadata: the node bootstrap as ``startup-script``, ``block-project-ssh-keys``
  and the exact ownership tags (see ``gcp_labels``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.cloud import compute_v1

from spotfleet.model.offering import Market, Offering
from spotfleet.providers import gcp_labels
from spotfleet.providers.base import CloudState, ProviderInstance
from spotfleet.providers.gcp_config import GcpProviderConfig

PROVIDER = "gcp"

# Families whose boot disk must be Hyperdisk (no Persistent Disk support).
_HYPERDISK_ONLY = ("a3-ultragpu", "a4-", "a4x-")

_STATES = {
    "PROVISIONING": CloudState.PENDING,
    "STAGING": CloudState.PENDING,
    "RUNNING": CloudState.RUNNING,
    "REPAIRING": CloudState.RUNNING,
    "STOPPING": CloudState.STOPPING,
    "SUSPENDING": CloudState.STOPPING,
    "SUSPENDED": CloudState.TERMINATED,
    "STOPPED": CloudState.TERMINATED,
    "TERMINATED": CloudState.TERMINATED,
}


@dataclass(frozen=True, slots=True)
class Shape:
    """What to ask GCE for: a machine type, plus attached accelerators for N1."""

    machine_type: str
    accelerator: str | None = None
    accelerator_count: int = 0

    @classmethod
    def of(cls, offering: Offering) -> Shape:
        """Parsed from the instance type alone (the store keeps no offering extras).

        ``n1-standard-8+1xnvidia-tesla-t4`` → N1 machine type plus one T4;
        anything else is a machine type that carries its own GPUs.
        """
        machine_type, plus, accelerators = offering.instance_type.partition("+")
        if not plus:
            return cls(machine_type)
        count, _, accelerator = accelerators.partition("x")
        return cls(machine_type, accelerator, int(count))


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def provider_id(zone: str, name: str) -> str:
    """spotfleet's id for a GCE VM: ``<zone>/<name>`` (unique per project, self-locating)."""
    return f"{zone}/{name}"


def split_provider_id(value: str) -> tuple[str, str] | None:
    zone, sep, name = value.partition("/")
    return (zone, name) if sep and zone and name and "/" not in name else None


def _boot_disk_type(config: GcpProviderConfig, machine_type: str) -> str:
    if config.boot_disk_type:
        return config.boot_disk_type
    return "hyperdisk-balanced" if machine_type.startswith(_HYPERDISK_ONLY) else "pd-balanced"


def instance_fields(
    *,
    config: GcpProviderConfig,
    offering: Offering,
    labels: Mapping[str, str],
    tags: Mapping[str, str],
    startup_script: str,
    zonal: bool,
) -> dict[str, Any]:
    """Fields shared by ``Instance`` (``zonal=True``) and ``InstanceProperties``."""
    shape = Shape.of(offering)
    zone = offering.zone

    def ref(kind: str, name: str) -> str:
        return f"zones/{zone}/{kind}/{name}" if zonal else name

    scheduling = compute_v1.Scheduling(
        provisioning_model="SPOT" if offering.market is Market.SPOT else "STANDARD",
        on_host_maintenance="TERMINATE",
        automatic_restart=False,
    )
    if offering.market is Market.SPOT:
        scheduling.instance_termination_action = config.termination_action
    if config.max_run_duration is not None:
        scheduling.max_run_duration = compute_v1.Duration(seconds=int(config.max_run_duration.total_seconds()))
        scheduling.instance_termination_action = config.termination_action
    nic = compute_v1.NetworkInterface(network=config.network)
    if config.subnetwork:
        nic.subnetwork = config.subnetwork
    if config.external_ip:
        nic.access_configs = [compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")]
    fields: dict[str, Any] = {
        "machine_type": ref("machineTypes", shape.machine_type),
        "labels": dict(labels),
        "scheduling": scheduling,
        "metadata": compute_v1.Metadata(
            items=[
                compute_v1.Items(key="startup-script", value=startup_script),
                compute_v1.Items(key="block-project-ssh-keys", value="TRUE"),
                compute_v1.Items(key=gcp_labels.TAGS_METADATA_KEY, value=gcp_labels.tags_metadata(tags)),
            ]
        ),
        "shielded_instance_config": compute_v1.ShieldedInstanceConfig(
            enable_secure_boot=config.secure_boot,
            enable_vtpm=True,
            enable_integrity_monitoring=True,
        ),
        "disks": [
            compute_v1.AttachedDisk(
                boot=True,
                auto_delete=True,
                initialize_params=compute_v1.AttachedDiskInitializeParams(
                    source_image=config.image,
                    disk_size_gb=config.boot_disk_gb,
                    disk_type=ref("diskTypes", _boot_disk_type(config, shape.machine_type)),
                    labels=dict(labels),
                ),
            )
        ],
        "network_interfaces": [nic],
    }
    if shape.accelerator:
        fields["guest_accelerators"] = [
            compute_v1.AcceleratorConfig(
                accelerator_type=ref("acceleratorTypes", shape.accelerator),
                accelerator_count=shape.accelerator_count,
            )
        ]
    if config.service_account:
        fields["service_accounts"] = [
            compute_v1.ServiceAccount(email=config.service_account, scopes=list(config.service_account_scopes))
        ]
    if config.network_tags:
        fields["tags"] = compute_v1.Tags(items=list(config.network_tags))
    return fields


def _instance_type(instance: compute_v1.Instance) -> str:
    machine_type = instance.machine_type.rsplit("/", 1)[-1]
    accelerators = list(instance.guest_accelerators)
    if machine_type.startswith("n1-") and accelerators:
        accel = accelerators[0]
        return f"{machine_type}+{accel.accelerator_count}x{accel.accelerator_type.rsplit('/', 1)[-1]}"
    return machine_type


def _timestamp(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


def tags_of(instance: compute_v1.Instance) -> dict[str, str]:
    """The instance's spotfleet tags: the exact metadata copy, else decoded labels."""
    for item in instance.metadata.items:
        if item.key == gcp_labels.TAGS_METADATA_KEY:
            tags = gcp_labels.tags_from_metadata(item.value)
            if tags is not None:
                return tags
    return gcp_labels.labels_to_tags(instance.labels)


def to_provider_instance(instance: compute_v1.Instance) -> ProviderInstance:
    zone = instance.zone.rsplit("/", 1)[-1]
    nics = list(instance.network_interfaces)
    market = Market.SPOT if instance.scheduling.provisioning_model == "SPOT" else Market.ON_DEMAND
    return ProviderInstance(
        provider=PROVIDER,
        provider_id=provider_id(zone, instance.name),
        instance_type=_instance_type(instance),
        region=region_of(zone),
        zone=zone,
        market=market,
        state=_STATES.get(instance.status, CloudState.PENDING),
        tags=tags_of(instance),
        launched_at=_timestamp(instance.creation_timestamp),
        address=(nics[0].network_i_p or None) if nics else None,
    )
