"""Ownership on GCP: labels, instance names and idempotency keys.

The Protocol speaks in tags (``spotfleet:cluster``); GCP labels allow only
lowercase letters, digits, ``_`` and ``-`` (63 characters), so:

- tag keys map to label keys (``spotfleet:cluster`` → ``spotfleet-cluster``);
- a value that is already a valid label value is kept as is, any other is
  lowered, cleaned and suffixed with a hash of the original, so two distinct
  values never share a label (the cluster filter stays exact);
- the exact original tags ride along in instance metadata (``spotfleet-tags``,
  JSON), which is how ``ProviderInstance.tags`` round-trips losslessly.

Instance names and GCE ``requestId`` values are derived deterministically from
the launch request id, so a retried launch names the same VM and carries the same
request id: GCE answers the original operation instead of buying twice.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Mapping

from spotfleet.providers.base import TAG_CLUSTER

LABEL_CLUSTER = "spotfleet-cluster"
LABEL_REQUEST_ID = "spotfleet-request-id"
LABEL_INSTANCE_ID = "spotfleet-instance-id"
TAGS_METADATA_KEY = "spotfleet-tags"

# Fixed namespace for uuid5 request ids (any constant works; never change it).
REQUEST_NAMESPACE = uuid.UUID("6a0f4f1e-2c5b-5d7e-9a41-5f0c1e7d2b93")

_VALID_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_VALID_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
_INVALID_CHARS = re.compile(r"[^a-z0-9_-]+")


def _digest(text: str, length: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def label_key(tag_key: str) -> str:
    """``spotfleet:request-id`` → ``spotfleet-request-id`` (any tag key → a valid label key)."""
    base = tag_key.lower().replace(":", "-")
    if _VALID_KEY.match(base):
        return base
    cleaned = _INVALID_CHARS.sub("-", base).strip("-_")
    if not cleaned[:1].isalpha():
        cleaned = f"t-{cleaned}"
    return f"{cleaned[:54]}-{_digest(tag_key, 8)}"


def label_value(value: str) -> str:
    """A valid label value that identifies ``value`` (kept verbatim when already valid)."""
    if _VALID_VALUE.match(value):
        return value
    cleaned = _INVALID_CHARS.sub("-", value.lower()).strip("-")[:54]
    return f"{cleaned}-{_digest(value, 8)}" if cleaned else _digest(value, 16)


def tags_to_labels(tags: Mapping[str, str]) -> dict[str, str]:
    return {label_key(k): label_value(v) for k, v in tags.items()}


def labels_to_tags(labels: Mapping[str, str]) -> dict[str, str]:
    """Best-effort inverse for instances without the metadata copy (values may be hashed)."""
    return {
        f"spotfleet:{k.removeprefix('spotfleet-')}" if k.startswith("spotfleet-") else k: v for k, v in labels.items()
    }


def tags_metadata(tags: Mapping[str, str]) -> str:
    return json.dumps(dict(sorted(tags.items())), separators=(",", ":"))


def tags_from_metadata(text: str) -> dict[str, str] | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        return None
    return {str(k): v for k, v in data.items()}


def cluster_filter(cluster: str) -> str:
    """The list filter selecting this cluster's instances."""
    return f'labels.{LABEL_CLUSTER} = "{label_value(cluster)}"'


def request_filter(cluster: str, request_id: str) -> str:
    """Both clauses parenthesized, as the Compute list-filter grammar wants for AND."""
    return f'({cluster_filter(cluster)}) AND (labels.{LABEL_REQUEST_ID} = "{label_value(request_id)}")'


def owned(labels: Mapping[str, str], cluster: str) -> bool:
    return labels.get(LABEL_CLUSTER) == label_value(cluster)


def name_prefix(cluster: str) -> str:
    """Every VM of ``cluster`` is named ``sf-<5 hex of cluster>-...``."""
    return f"sf-{_digest(f'cluster/{cluster}', 5)}-"


def instance_name(cluster: str, request_id: str) -> str:
    """The VM name for a single-instance launch (stable across retries)."""
    return f"{name_prefix(cluster)}{_digest(f'request/{request_id}', 12)}"


def bulk_name_pattern(cluster: str, request_id: str, count: int) -> str:
    """``namePattern`` for bulkInsert: the single-instance name plus ``-###``."""
    width = max(3, len(str(count)))
    return f"{instance_name(cluster, request_id)}-{'#' * width}"


def launch_names(cluster: str, request_id: str, count: int) -> list[str]:
    """The VM names a launch of ``count`` creates (bulkInsert numbers from 1)."""
    if count == 1:
        return [instance_name(cluster, request_id)]
    pattern = bulk_name_pattern(cluster, request_id, count)
    width = pattern.count("#")
    return [pattern.replace("#" * width, str(n).zfill(width)) for n in range(1, count + 1)]


def gce_request_id(request_id: str, *, scope: str) -> str:
    """A UUID (GCE's required ``requestId`` form) derived from a spotfleet request id.

    ``scope`` separates the calls one spotfleet request makes (one insert per
    zone tried, one delete per instance), so each gets its own stable key.
    """
    return str(uuid.uuid5(REQUEST_NAMESPACE, f"{request_id}/{scope}"))


def with_ownership(tags: Mapping[str, str], cluster: str) -> dict[str, str]:
    """The request's tags with this provider's cluster stamped on (ownership is ours to set)."""
    return {**tags, TAG_CLUSTER: cluster}
