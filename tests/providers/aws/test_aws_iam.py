"""Every boto3 call in providers/aws*.py is covered by REQUIRED_IAM_ACTIONS, and nothing more."""

from __future__ import annotations

import ast
from pathlib import Path

import boto3

from spotfleet.providers import aws_iam
from spotfleet.providers.aws_iam import IMPLIED_IAM_ACTIONS, REQUIRED_IAM_ACTIONS, iam_action

PROVIDERS = Path(__file__).resolve().parents[3] / "providers"
SERVICES = ("ec2", "sqs", "pricing")


def operations_by_method() -> dict[str, list[tuple[str, str]]]:
    """boto3 method name → [(service, API operation)], from botocore's own service models."""
    session = boto3.Session(aws_access_key_id="x", aws_secret_access_key="x", region_name="us-east-1")
    found: dict[str, list[tuple[str, str]]] = {}
    for service in SERVICES:
        client = session.client(service)
        for method, operation in client.meta.method_to_api_mapping.items():
            found.setdefault(method, []).append((service, operation))
    return found


def called_methods(path: Path) -> set[str]:
    """Attribute calls (``x.create_fleet(...)``) and paginator names in one module."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            names.add(node.func.attr)
            if node.func.attr == "get_paginator" and node.args and isinstance(node.args[0], ast.Constant):
                names.add(str(node.args[0].value))
    return names


def used_actions() -> set[str]:
    by_method = operations_by_method()
    actions: set[str] = set()
    for path in sorted(PROVIDERS.glob("aws*.py")):
        for method in called_methods(path) & set(by_method):
            actions.update(iam_action(service, operation) for service, operation in by_method[method])
    return actions


def test_every_client_call_maps_to_a_required_action() -> None:
    used = used_actions()
    assert {"ec2:CreateFleet", "ec2:DescribeSpotPriceHistory", "sqs:ReceiveMessage"} <= used  # the scan sees calls
    missing = used - REQUIRED_IAM_ACTIONS
    assert not missing, f"add to REQUIRED_IAM_ACTIONS: {sorted(missing)}"


def test_no_required_action_is_unused() -> None:
    unused = REQUIRED_IAM_ACTIONS - used_actions() - IMPLIED_IAM_ACTIONS
    assert not unused, f"REQUIRED_IAM_ACTIONS lists actions no code calls: {sorted(unused)}"


def test_the_list_is_declared_in_one_place() -> None:
    declaring = [p.name for p in PROVIDERS.glob("aws*.py") if "REQUIRED_IAM_ACTIONS: frozenset" in p.read_text()]
    assert declaring == ["aws_iam.py"]
    assert isinstance(aws_iam.REQUIRED_IAM_ACTIONS, frozenset)
