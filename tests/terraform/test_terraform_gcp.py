"""The GCP module: the controller's permissions, how workers look, who reaches whom."""

from __future__ import annotations

from spotfleet.providers.gcp_config import GcpProviderConfig
from spotfleet.providers.gcp_labels import LABEL_CLUSTER
from spotfleet.providers.gcp_permissions import REQUIRED_PERMISSIONS
from tests.terraform.hcl import for_object_keys, module

GCP = module("gcp")

# Resource types that take no labels; any other google_* resource must be labelled.
UNLABELLABLE = {
    "google_service_account",
    "google_project_iam_custom_role",
    "google_project_iam_member",
    "google_service_account_iam_member",
    "google_secret_manager_secret_iam_member",
    "google_compute_firewall",
}


def role_permissions() -> dict[str, set[str]]:
    return {r.name: set(GCP.resolve(r.body["permissions"])) for r in GCP.resources("google_project_iam_custom_role")}


def test_custom_roles_hold_exactly_the_providers_permissions() -> None:
    roles = role_permissions()
    granted = set().union(*roles.values())
    assert granted == set(REQUIRED_PERMISSIONS), (
        f"missing: {sorted(set(REQUIRED_PERMISSIONS) - granted)}; extra: {sorted(granted - set(REQUIRED_PERMISSIONS))}"
    )
    # Each permission in one role only: actAs is the one granted on the worker account alone.
    assert sum(len(p) for p in roles.values()) == len(granted)
    assert roles["controller_act_as"] == {"iam.serviceAccounts.actAs"}


def test_act_as_is_granted_on_the_worker_account_only() -> None:
    (binding,) = GCP.resources("google_service_account_iam_member")
    assert binding.body["service_account_id"] == "${google_service_account.worker.name}"
    assert binding.body["role"] == "${google_project_iam_custom_role.controller_act_as.id}"
    assert "google_service_account.controller.email" in binding.body["member"]
    project_roles = {r.body["role"] for r in GCP.resources("google_project_iam_member")}
    assert "${google_project_iam_custom_role.controller_act_as.id}" not in project_roles
    assert project_roles <= {"${google_project_iam_custom_role.controller_compute.id}", "roles/logging.logWriter"}


def test_worker_template_is_spot_deleted_on_preemption_shielded_and_locked_down() -> None:
    template = GCP.resource("google_compute_instance_template", "worker")
    scheduling = template.block("scheduling")
    assert scheduling["provisioning_model"] == "SPOT"
    assert scheduling["preemptible"] is True
    assert scheduling["instance_termination_action"] == "DELETE"
    assert scheduling["automatic_restart"] is False
    shielded = template.block("shielded_instance_config")
    assert shielded == {"enable_secure_boot": True, "enable_vtpm": True, "enable_integrity_monitoring": True}
    metadata = template.body["metadata"]
    assert metadata["block-project-ssh-keys"] == "TRUE"
    assert metadata["enable-oslogin"] == "TRUE"
    assert "access_config" not in template.block("network_interface"), "workers get no external address"
    assert template.block("service_account")["email"] == "${google_service_account.worker.email}"


def test_controller_vm_is_shielded_private_and_locked_down() -> None:
    vm = GCP.resource("google_compute_instance", "controller")
    assert vm.block("shielded_instance_config")["enable_secure_boot"] is True
    assert vm.body["metadata"]["block-project-ssh-keys"] == "TRUE"
    assert vm.body["metadata"]["enable-oslogin"] == "TRUE"
    assert "access_config" not in vm.block("network_interface")
    assert vm.block("service_account")["email"] == "${google_service_account.controller.email}"


def test_provider_config_matches_the_template_and_the_config_model() -> None:
    keys = for_object_keys(GCP.locals["provider_config"])
    assert keys <= set(GcpProviderConfig.model_fields), keys - set(GcpProviderConfig.model_fields)
    assert {"project", "zones", "subnetwork", "service_account", "termination_action", "secure_boot"} <= keys
    config = GCP.locals["provider_config"]
    assert 'termination_action = "DELETE"' in config and "secure_boot = true" in config
    assert "service_account = google_service_account.worker.email" in config
    assert "external_ip = false" in config


def test_every_labellable_resource_is_labelled() -> None:
    resources = GCP.resources()
    assert len(resources) > 10
    for r in resources:
        if r.type in UNLABELLABLE:
            continue
        assert r.body.get("labels"), f"{r.address} ({r.file.name}) is not labelled"
    assert GCP.resource("google_compute_instance_template", "worker").block("disk")["labels"] == "${local.labels}"
    vm = GCP.resource("google_compute_instance", "controller")
    assert vm.block("boot_disk")["initialize_params"][0]["labels"] == "${local.controller_labels}"


def test_the_controller_never_carries_the_cluster_label() -> None:
    assert GCP.locals["cluster_label_key"] == LABEL_CLUSTER
    assert LABEL_CLUSTER not in GCP.locals["controller_labels"]
    assert "cluster_label_key" not in GCP.locals["controller_labels"]
    assert GCP.resource("google_compute_instance", "controller").body["labels"] == "${local.controller_labels}"


def test_firewall_only_opens_the_api_to_workers_and_listed_users() -> None:
    rules = {r.name: r.body for r in GCP.resources("google_compute_firewall")}
    for name, rule in rules.items():
        assert rule.get("description"), name
        if "allow" in rule:
            assert "0.0.0.0/0" not in str(rule.get("source_ranges", "")), name
    api = rules["controller_api_from_workers"]
    assert api["allow"] == [{"protocol": "tcp", "ports": ["${tostring(var.api_port)}"]}]
    assert api["source_service_accounts"] == ["${google_service_account.worker.email}"]
    assert api["target_service_accounts"] == ["${google_service_account.controller.email}"]
    deny = rules["workers_deny_ingress"]
    assert deny["deny"] == [{"protocol": "all"}]
    assert deny["target_service_accounts"] == ["${google_service_account.worker.email}"]
    assert rules["workers_from_workers"]["priority"] < deny["priority"]
