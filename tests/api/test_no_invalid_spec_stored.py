"""Property: whatever a client posts to ``POST /v1/jobs``, the answer is a 201
for a spec that validates (and is stored once) or a 4xx with nothing stored —
never a 5xx, never an invalid spec in the store. SQLite and PostgreSQL."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spotfleet.api.app import create_app
from spotfleet.model.spec import check_submission, parse_spec
from spotfleet.store import Store
from tests.controller.harness import make_harness

FIELDS = ["name", "tenant", "family", "command", "image", "env", "workdir", "resources", "priority", "interruptible",
          "deadline", "expected_duration", "checkpoint", "max_price_per_hour", "regions", "providers", "dataset",
          "labels", "max_retries", "throughput", "bogus"]  # fmt: skip
NASTY_FLOATS = st.sampled_from([math.inf, -math.inf, math.nan, 1e20, 1e308, -1.0, 0.0, 2**63, 0.5])
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70), NASTY_FLOATS,
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.sampled_from(["inf", "1e20", "400d", "2h", "SIGKILL", "_dfl", "a\x00b", "H100", "V100", "x\n",
                     "2000-01-01T00:00:00Z", "2999-01-01T00:00:00Z", "opportunistic", "../x"]),
)  # fmt: skip
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                      max_leaves=8)  # fmt: skip
SUB_FIELDS = {
    "resources": ["gpus", "gpu_types", "gpu_memory_gib", "mig", "gpu_fraction", "nodes", "cpus", "memory_gib"],
    "checkpoint": ["interval", "signal", "grace"],
    "dataset": ["region", "size_gib"],
}
NESTED = st.sampled_from(list(SUB_FIELDS)).flatmap(
    lambda key: st.tuples(st.just(key), st.dictionaries(st.sampled_from(SUB_FIELDS[key]), VALUES, max_size=3))
)
BODIES = st.tuples(st.dictionaries(st.sampled_from(FIELDS), VALUES, max_size=4), st.lists(NESTED, max_size=2)).map(
    lambda t: {"name": "p", "command": "true", **t[0], **dict(t[1])}
)


def test_no_invalid_spec_is_ever_stored(store: Store, tmp_path: Path) -> None:
    h = make_harness(store, tmp_path)
    client = TestClient(create_app(h.controller), raise_server_exceptions=False)
    known = h.controller.known_gpus()

    @settings(max_examples=120, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
    @given(body=BODIES)
    def prop(body: dict[str, Any]) -> None:
        before = len(store.list_jobs())
        text = json.dumps(body)  # writes NaN/Infinity as a careless client would
        resp = client.post("/v1/jobs", content=text, headers={"content-type": "application/json"})
        after = store.list_jobs()
        assert resp.status_code < 500, (body, resp.text)
        if resp.status_code == 201:
            assert len(after) == before + 1
            stored = store.get_job(resp.json()["id"]).spec
            again = parse_spec(stored.model_dump(mode="json", exclude_none=True))
            check_submission(again, now=h.clock.now(), known_gpus=known)
            json.dumps(stored.model_dump(mode="json"), allow_nan=False)
        else:
            assert 400 <= resp.status_code < 500 and len(after) == before, (body, resp.status_code)

    prop()
