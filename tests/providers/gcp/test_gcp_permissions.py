"""Every Compute Engine client call in providers/gcp*.py is covered by REQUIRED_PERMISSIONS."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from google.cloud import compute_v1

from spotfleet.providers.gcp import GcpClients
from spotfleet.providers.gcp_permissions import CALL_PERMISSIONS, REQUIRED_PERMISSIONS

PROVIDERS = Path(__file__).resolve().parents[3] / "providers"

# GcpClients field name -> client class; the provider reaches clients only through these.
CLIENTS: dict[str, type] = {
    name: getattr(compute_v1, hint.rsplit(".", 1)[-1]) for name, hint in inspect.get_annotations(GcpClients).items()
}
API_METHODS = {
    name
    for cls in CLIENTS.values()
    for name, member in vars(cls).items()
    if callable(member) and not name.startswith("_") and not isinstance(member, staticmethod | classmethod)
}


def _client_calls() -> list[tuple[str, str, str]]:
    """(file:line, client attribute, method) for every ``<...>.<client>.<method>(...)`` call."""
    found = []
    for path in sorted(PROVIDERS.glob("gcp*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            receiver = node.func.value
            name = receiver.attr if isinstance(receiver, ast.Attribute) else getattr(receiver, "id", "")
            if name in CLIENTS:
                found.append((f"{path.name}:{node.lineno}", name, node.func.attr))
    return found


def test_the_scan_sees_the_provider_calls() -> None:
    methods = {m for _, _, m in _client_calls()}
    assert {"insert_unary", "bulk_insert_unary", "wait", "list", "get", "delete_unary"} <= methods


def test_every_client_call_maps_to_declared_permissions() -> None:
    missing = []
    for where, attr, method in _client_calls():
        cls = CLIENTS[attr]
        assert hasattr(cls, method), f"{where}: {cls.__name__} has no method {method}"
        key = f"{cls.__name__}.{method}"
        if key not in CALL_PERMISSIONS:
            missing.append(f"{where}: {key}")
    assert not missing, f"client calls without declared permissions: {missing}"


def test_no_client_is_reached_around_the_scan() -> None:
    """Clients are built only in gcp.py (GcpClients.create) and never aliased to other names."""
    for path in sorted(PROVIDERS.glob("gcp*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            builds_client = (
                isinstance(node, ast.Attribute)
                and node.attr.endswith("Client")
                and isinstance(node.value, ast.Name)
                and node.value.id == "compute_v1"
            )
            if builds_client and path.name != "gcp.py":
                raise AssertionError(f"{path.name}:{node.lineno}: builds a Compute client outside GcpClients")
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute) and node.value.attr in CLIENTS:
                targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
                assert targets == [node.value.attr], f"{path.name}:{node.lineno}: client aliased as {targets}"


def test_required_permissions_are_the_union_and_well_formed() -> None:
    assert frozenset().union(*CALL_PERMISSIONS.values()) == REQUIRED_PERMISSIONS
    assert all(p.count(".") == 2 and p.split(".")[0] in {"compute", "iam"} for p in REQUIRED_PERMISSIONS)
    assert {
        "compute.instances.create",
        "compute.instances.delete",
        "compute.zoneOperations.list",
    } <= REQUIRED_PERMISSIONS
    for key in CALL_PERMISSIONS:
        client, method = key.split(".")
        assert hasattr(getattr(compute_v1, client), method), key
    assert API_METHODS  # sanity: the client classes were introspected
