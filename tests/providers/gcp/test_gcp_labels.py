"""Tag ↔ label translation and deterministic names / request ids."""

from __future__ import annotations

import re
import uuid

from hypothesis import given
from hypothesis import strategies as st

from spotfleet.providers import gcp_labels
from spotfleet.providers.base import TAG_CLUSTER, TAG_INSTANCE_ID, TAG_REQUEST_ID

LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


def test_ownership_tags_become_the_documented_labels() -> None:
    labels = gcp_labels.tags_to_labels({TAG_CLUSTER: "prod", TAG_REQUEST_ID: "r-1", TAG_INSTANCE_ID: "i-2"})
    assert labels == {
        "spotfleet-cluster": "prod",
        "spotfleet-request-id": "r-1",
        "spotfleet-instance-id": "i-2",
    }
    assert gcp_labels.labels_to_tags(labels) == {
        TAG_CLUSTER: "prod",
        TAG_REQUEST_ID: "r-1",
        TAG_INSTANCE_ID: "i-2",
    }


@given(st.text(max_size=120))
def test_any_value_becomes_a_valid_label_value(value: str) -> None:
    assert LABEL_VALUE.match(gcp_labels.label_value(value))


@given(st.text(min_size=1, max_size=120))
def test_any_key_becomes_a_valid_label_key(key: str) -> None:
    assert LABEL_KEY.match(gcp_labels.label_key(key))


@given(st.text(max_size=60), st.text(max_size=60))
def test_distinct_values_get_distinct_labels(a: str, b: str) -> None:
    if a != b:
        assert gcp_labels.label_value(a) != gcp_labels.label_value(b)


@given(st.dictionaries(st.text(max_size=20), st.text(max_size=40), max_size=5))
def test_metadata_round_trips_tags_exactly(tags: dict[str, str]) -> None:
    assert gcp_labels.tags_from_metadata(gcp_labels.tags_metadata(tags)) == tags


@given(st.text(max_size=80), st.text(max_size=80), st.integers(min_value=2, max_value=1000))
def test_names_are_valid_stable_and_scoped_to_the_cluster(cluster: str, request_id: str, count: int) -> None:
    name = gcp_labels.instance_name(cluster, request_id)
    assert NAME.match(name) and name == gcp_labels.instance_name(cluster, request_id)
    assert name.startswith(gcp_labels.name_prefix(cluster))
    pattern = gcp_labels.bulk_name_pattern(cluster, request_id, count)
    assert NAME.match(pattern.replace("#", "0")) and pattern.count("#") >= len(str(count))
    names = gcp_labels.launch_names(cluster, request_id, count)
    assert len(set(names)) == count and all(NAME.match(n) for n in names)


def test_gce_request_ids_are_uuids_stable_per_scope() -> None:
    a = gcp_labels.gce_request_id("req-1", scope="gcp:spot:a3-highgpu-8g:us-central1-a")
    assert uuid.UUID(a).version == 5
    assert a == gcp_labels.gce_request_id("req-1", scope="gcp:spot:a3-highgpu-8g:us-central1-a")
    assert a != gcp_labels.gce_request_id("req-1", scope="gcp:spot:a3-highgpu-8g:us-central1-b")
    assert a != gcp_labels.gce_request_id("req-2", scope="gcp:spot:a3-highgpu-8g:us-central1-a")
