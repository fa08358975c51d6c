"""Builds the configured providers by name — an explicit table, no string
imports: adding a cloud means adding one line here."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from spotfleet.clock import Clock
from spotfleet.errors import InvalidSpec
from spotfleet.model.spec import format_validation_error
from spotfleet.providers.base import Provider


def _local(options: Mapping[str, Any], *, cluster: str, clock: Clock, data_dir: Path) -> Provider:
    from spotfleet.providers.local import LocalProvider, LocalProviderConfig

    cfg = LocalProviderConfig.model_validate(dict(options))
    return LocalProvider(state_dir=data_dir / "local-instances", cluster=cluster, clock=clock,
                         heartbeat_seconds=cfg.heartbeat.total_seconds(), max_instances=cfg.max_instances)  # fmt: skip


def _aws(options: Mapping[str, Any], *, cluster: str, clock: Clock, data_dir: Path) -> Provider:
    from spotfleet.extras import requires

    with requires("aws", "the AWS provider (providers.aws)"):
        import boto3  # type: ignore[import-untyped]

        from spotfleet.providers.aws import build_aws_provider

    if not options.get("endpoint_url") and boto3.Session().get_credentials() is None:
        from spotfleet.errors import MissingCredentials

        raise MissingCredentials(
            "providers.aws: no AWS credentials found: set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
            "or run on an instance with a role (docs/aws.md)"
        )

    return build_aws_provider(options, cluster=cluster, clock=clock, data_dir=data_dir)


def _gcp(options: Mapping[str, Any], *, cluster: str, clock: Clock, data_dir: Path) -> Provider:
    from spotfleet.extras import requires

    with requires("gcp", "the GCP provider (providers.gcp)"):
        from spotfleet.providers.gcp import from_options

    return from_options(options, cluster=cluster, clock=clock, data_dir=data_dir)


Factory = Callable[..., Provider]
# imported lazily: a controller that only uses one cloud never imports the other's SDK
FACTORIES: dict[str, Factory] = {"local": _local, "aws": _aws, "gcp": _gcp}


def build_providers(
    configs: Mapping[str, Mapping[str, Any]], *, cluster: str, clock: Clock, data_dir: Path
) -> dict[str, Provider]:
    providers: dict[str, Provider] = {}
    for name, options in configs.items():
        factory = FACTORIES.get(name)
        if factory is None:
            import difflib

            guess = difflib.get_close_matches(name, list(FACTORIES), n=1)
            hint = f"did you mean {guess[0]!r}? " if guess else ""
            raise InvalidSpec(f"providers.{name}", f"unknown provider; {hint}use one of {', '.join(sorted(FACTORIES))}")
        try:
            providers[name] = factory(options or {}, cluster=cluster, clock=clock, data_dir=data_dir)
        except ValidationError as exc:
            raise format_validation_error(exc, prefix=f"providers.{name}", docs=f"docs/{name}.md") from None
    if not providers:
        raise InvalidSpec("providers", "configure at least one provider (e.g. providers: {local: {}})")
    return providers
