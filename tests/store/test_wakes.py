"""A follower's news wakes the leader at once: PostgreSQL LISTEN/NOTIFY (``store/wakes.py``)."""

from __future__ import annotations

import threading
from pathlib import Path

from spotfleet.store import Store
from spotfleet.store.wakes import WakeListener, channel, notify


def test_a_notify_from_another_connection_reaches_the_listener_of_its_cluster_only(pg_url: str) -> None:
    leader_store, follower_store = Store(pg_url), Store(pg_url)
    woken = {"prod": threading.Event(), "other": threading.Event()}
    listeners = [WakeListener(leader_store, name, woken[name].set) for name in woken]
    try:
        for listener in listeners:
            listener.start()
            assert listener.listening.wait(20), "LISTEN never took effect"
        notify(follower_store, "prod")
        assert woken["prod"].wait(20), "the notification never arrived"
        notify(follower_store, "prod")  # a second burst wakes again
        assert not woken["other"].is_set(), "another cluster's replicas are not woken"
    finally:
        for listener in listeners:
            listener.stop()
        leader_store.close()
        follower_store.close()


def test_channels_are_plain_identifiers_and_sqlite_needs_none(tmp_path: Path) -> None:
    assert channel("prod") != channel("prod2")
    assert channel('we"ird name; drop').replace("_", "").isalnum()
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    notify(store, "prod")  # single-controller: nothing to wake, nothing sent
    store.close()


def test_a_listener_stopped_before_it_started_stops_cleanly(pg_url: str) -> None:
    store = Store(pg_url)
    WakeListener(store, "default", lambda: None).stop()
    store.close()


def test_a_followers_wake_notifies_the_leader_once_per_burst(pg_url: str, tmp_path: Path) -> None:
    from spotfleet.config import load_config
    from spotfleet.service import Service

    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"database: {pg_url}\ndata_dir: {tmp_path}/data\ncluster: wakes\napi: {{port: 0}}\n")
    follower = Service(load_config(cfg))  # never ticked its lease: a follower
    seen: list[int] = []
    arrived = threading.Event()
    listener = WakeListener(follower.store, "wakes", lambda: (seen.append(1), arrived.set()))
    try:
        listener.start()
        assert listener.listening.wait(20)
        assert not follower.elector.is_leader
        follower.wake()  # a submission through this replica
        follower.wake()  # the same burst: the step is already pending here
        assert arrived.wait(20), "the leader was not woken"
        arrived.clear()
        notify(follower.store, "wakes")  # a marker: every earlier notification arrives before it
        assert arrived.wait(20)
        assert len(seen) == 2, "one wake per burst, then the marker"
    finally:
        listener.stop()
        follower.stop()
