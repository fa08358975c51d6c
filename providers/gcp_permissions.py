"""Every IAM permission the GCP provider's API calls need, declared in one place.

``CALL_PERMISSIONS`` maps each client method the provider calls to what that call
needs with the instance shape the provider builds (boot disk from an image,
labels, metadata, a service account, a subnetwork, optional external IP and
network tags). ``REQUIRED_PERMISSIONS`` is their union: the terraform module's
custom role is compared against it, and a test scans ``providers/gcp*.py`` for
client calls and fails if one is missing here.
"""

from __future__ import annotations

_CREATE = frozenset(
    {
        "compute.instances.create",
        "compute.instances.setLabels",
        "compute.instances.setMetadata",
        "compute.instances.setServiceAccount",
        "compute.instances.setTags",
        "compute.disks.create",
        "compute.images.useReadOnly",
        "compute.subnetworks.use",
        "compute.subnetworks.useExternalIp",
        "iam.serviceAccounts.actAs",
        "compute.resourcePolicies.use",
    }
)

CALL_PERMISSIONS: dict[str, frozenset[str]] = {
    "InstancesClient.insert_unary": _CREATE,
    "InstancesClient.bulk_insert_unary": _CREATE,
    "InstancesClient.get": frozenset({"compute.instances.get"}),
    "InstancesClient.list": frozenset({"compute.instances.list"}),
    "InstancesClient.delete_unary": frozenset({"compute.instances.delete"}),
    "ZoneOperationsClient.wait": frozenset({"compute.zoneOperations.get"}),
    "ZoneOperationsClient.get": frozenset({"compute.zoneOperations.get"}),
    "ZoneOperationsClient.list": frozenset({"compute.zoneOperations.list"}),
    "MachineTypesClient.list": frozenset({"compute.machineTypes.list"}),
    "AcceleratorTypesClient.list": frozenset({"compute.acceleratorTypes.list"}),
    # gangs: compact placement policies (attached at insert: compute.resourcePolicies.use)
    "ResourcePoliciesClient.insert_unary": frozenset({"compute.resourcePolicies.create"}),
    "ResourcePoliciesClient.get": frozenset({"compute.resourcePolicies.get"}),
    "ResourcePoliciesClient.list": frozenset({"compute.resourcePolicies.list"}),
    "ResourcePoliciesClient.delete_unary": frozenset({"compute.resourcePolicies.delete"}),
    "RegionOperationsClient.wait": frozenset({"compute.regionOperations.get"}),
}

REQUIRED_PERMISSIONS: frozenset[str] = frozenset().union(*CALL_PERMISSIONS.values())
