"""boto3 clients for the AWS provider: one per (service, region), built once.

Every client shares one ``boto3.Session`` (so tests can register botocore event
hooks on ``session.events`` before any client exists) and one retry policy:
botocore's ``standard`` or ``adaptive`` mode retries throttling and 5xx with
exponential backoff and, in adaptive mode, a client-side rate limiter, so the
adapter itself never loops on a throttled call.

The Price List API lives in a few regions only (us-east-1 serves every region's
prices) and is optional: its client retries less and times out faster, because
the bundled catalog is an acceptable answer when it is unreachable.
"""

from __future__ import annotations

import threading
from typing import Any

import boto3  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]

from spotfleet.providers.aws_config import AwsProviderConfig

PRICING_REGION = "us-east-1"
USER_AGENT_EXTRA = "spotfleet"


class AwsClients:
    """Lazily built, cached boto3 clients (boto3 clients are thread-safe)."""

    def __init__(self, config: AwsProviderConfig, *, session: Any | None = None) -> None:
        self._config = config
        self.session: Any = session or boto3.Session()
        self._clients: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def _botocore_config(self, service: str) -> Any:
        if service == "pricing":
            return Config(
                retries={"mode": "standard", "max_attempts": 2},
                connect_timeout=3,
                read_timeout=10,
                user_agent_extra=USER_AGENT_EXTRA,
            )
        read_timeout = 60
        if service == "sqs":
            # A long poll holds the connection for WaitTimeSeconds.
            read_timeout = self._config.sqs_wait_seconds + 30
        return Config(
            retries={"mode": self._config.retry_mode, "max_attempts": self._config.max_attempts},
            connect_timeout=5,
            read_timeout=read_timeout,
            user_agent_extra=USER_AGENT_EXTRA,
        )

    def client(self, service: str, region: str) -> Any:
        key = (service, region)
        with self._lock:
            found = self._clients.get(key)
            if found is None:
                found = self.session.client(
                    service,
                    region_name=region,
                    endpoint_url=self._config.endpoint_url,
                    config=self._botocore_config(service),
                )
                self._clients[key] = found
            return found

    def ec2(self, region: str) -> Any:
        return self.client("ec2", region)

    def sqs(self, region: str) -> Any:
        return self.client("sqs", region)

    def pricing(self) -> Any:
        return self.client("pricing", PRICING_REGION)
