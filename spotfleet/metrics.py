"""Prometheus metrics for ``GET /metrics`` (prometheus-client).

Design choice: fleet gauges are computed from the store at scrape time by a
custom collector, not kept in process memory: the store is the truth, a
controller restart loses no counter, and nothing in the reconcile step has to
remember to bump a metric. The one thing only the process knows — how long
reconcile steps take — is measured by wrapping ``Controller.step`` (instrument
by wrapping, in one place). Each app gets its own registry, so tests and
several apps in one process never collide.

Metrics: ``spotfleet_instances{provider,market,instance_type,state}``,
``spotfleet_jobs{state,priority}``, ``spotfleet_jobs_pending{priority}``,
``spotfleet_spend_rate_usd_per_hour{provider,market}``,
``spotfleet_spend_usd_total{market}``, ``spotfleet_on_demand_equivalent_usd_total``,
``spotfleet_job_interruptions_total``, ``spotfleet_notices_total{kind}``,
``spotfleet_drains_total``, ``spotfleet_gpu_idle_alerts_total``,
``spotfleet_gpu_utilization_pct{instance_id,gpu}``,
``spotfleet_gpu_memory_used_mib{instance_id,gpu}``,
``spotfleet_job_gpu_share{job_id,attempt,node_rank,kind=given|used}`` (interference),
``spotfleet_reconcile_step_seconds`` (histogram).
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from spotfleet.clock import Clock
from spotfleet.spend import summarize
from spotfleet.store.store import Store

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class FleetCollector(Collector):
    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        now: datetime = self.clock.now()
        counts = self.store.fleet_counts()
        inst, jobs, interruptions = counts.instances, counts.jobs, counts.interruptions
        notices, events, presence = sorted(counts.notices.items()), counts.events, counts.presence
        g = GaugeMetricFamily(
            "spotfleet_instances", "Live instances", labels=["provider", "market", "instance_type", "state"]
        )
        for (provider, market, itype, state), n in sorted(Counter((r[0], r[1], r[2], r[3]) for r in inst).items()):
            g.add_metric([provider, market, itype, state], n)
        yield g
        rate = GaugeMetricFamily("spotfleet_spend_rate_usd_per_hour", "What the live fleet costs per hour",
                                 labels=["provider", "market"])  # fmt: skip
        rates: dict[tuple[str, str], float] = {}
        for r in inst:
            if r[5]:  # launched: being paid for
                rates[(r[0], r[1])] = rates.get((r[0], r[1]), 0.0) + r[4]
        for (provider, market), v in sorted(rates.items()):
            rate.add_metric([provider, market], v)
        yield rate
        js = GaugeMetricFamily("spotfleet_jobs", "Jobs by state and class", labels=["state", "priority"])
        pending = GaugeMetricFamily(
            "spotfleet_jobs_pending", "Jobs waiting for capacity, by class", labels=["priority"]
        )
        pend: dict[str, int] = {}
        for state, priority, n in jobs:
            js.add_metric([state, priority], n)
            if state == "pending":
                pend[priority] = pend.get(priority, 0) + n
        for priority in ("critical", "normal", "opportunistic"):
            pending.add_metric([priority], pend.get(priority, 0))
        yield js
        yield pending
        spend = summarize(self.store, now=now)
        total = CounterMetricFamily(
            "spotfleet_spend_usd",
            "Dollars spent so far: the ledger's total (`spotfleet cost report`), billing minimums included",
            labels=["market"],
        )
        for market, dollars in sorted(spend.dollars.items()):
            total.add_metric([market], dollars)
        yield total
        od = CounterMetricFamily("spotfleet_on_demand_equivalent_usd", "The same instance-hours at on-demand prices")
        od.add_metric([], spend.on_demand_equivalent)
        yield od
        intr = CounterMetricFamily("spotfleet_job_interruptions", "Job attempts ended by an interruption")
        intr.add_metric([], float(interruptions))
        yield intr
        nt = CounterMetricFamily(
            "spotfleet_notices", "Interruption/rebalance/maintenance notices received", labels=["kind"]
        )
        for kind, n in sorted(notices):
            nt.add_metric([kind], n)
        yield nt
        dr = CounterMetricFamily("spotfleet_drains", "Jobs asked to checkpoint and leave an instance")
        dr.add_metric([], events.get("job.draining", 0))
        yield dr
        idle = CounterMetricFamily("spotfleet_gpu_idle_alerts", "Instances whose GPUs sat idle while jobs were bound")
        idle.add_metric([], events.get("instance.gpus_idle", 0))
        yield idle
        util = GaugeMetricFamily(
            "spotfleet_gpu_utilization_pct", "GPU utilisation (NVML)", labels=["instance_id", "gpu"]
        )
        mem = GaugeMetricFamily(
            "spotfleet_gpu_memory_used_mib", "GPU memory used (NVML)", labels=["instance_id", "gpu"]
        )
        for instance_id, info in presence:
            for gpu in _gpus(info):
                if gpu.get("utilization_pct") is not None:
                    util.add_metric([instance_id, str(gpu.get("index"))], float(gpu["utilization_pct"]))
                if gpu.get("memory_used_mib") is not None:
                    mem.add_metric([instance_id, str(gpu.get("index"))], float(gpu["memory_used_mib"]))
        yield util
        yield mem
        share = GaugeMetricFamily(
            "spotfleet_job_gpu_share",
            "A job node's share of one GPU: given (its fraction or MIG slices/7) and used (its SM time, NVML)",
            labels=["job_id", "attempt", "node_rank", "kind"],
        )
        for _instance_id, info in presence:
            for j in _telemetry_jobs(info):
                labels = [str(j.get("job_id")), str(j.get("attempt")), str(j.get("node_rank"))]
                for kind in ("given", "used"):
                    value = j.get(f"{kind}_share")
                    if isinstance(value, int | float):
                        share.add_metric([*labels, kind], float(value))
        yield share


def _telemetry_jobs(info: Any) -> list[dict[str, Any]]:
    tel = info.get("telemetry") if isinstance(info, dict) else None
    jobs = tel.get("jobs") if isinstance(tel, dict) else None
    return [j for j in jobs if isinstance(j, dict)] if isinstance(jobs, list) else []


def _gpus(info: Any) -> list[dict[str, Any]]:
    tel = info.get("telemetry") if isinstance(info, dict) else None
    gpus = tel.get("gpus") if isinstance(tel, dict) else None
    return [g for g in gpus if isinstance(g, dict)] if isinstance(gpus, list) else []


STEP_NAME, STEP_HELP = "spotfleet_reconcile_step_seconds", "Duration of one reconcile step"


class FleetMetrics:
    """One registry per app: the store collector plus the step-duration histogram.

    ``published_steps``: the app is an API worker (``spotfleet.api.workers``),
    whose process never steps; it shows the step process's histogram as that
    process last published it (``step_histogram``)."""

    def __init__(
        self, store: Store, clock: Clock, *, published_steps: Callable[[], dict[str, Any]] | None = None
    ) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(FleetCollector(store, clock))
        self.step_seconds: Histogram | None = None
        if published_steps is None:
            self.step_seconds = Histogram(STEP_NAME, STEP_HELP, buckets=STEP_BUCKETS, registry=self.registry)
        else:
            self.registry.register(PublishedHistogram(published_steps))

    def step_histogram(self) -> dict[str, Any]:
        """The step histogram as plain data (cumulative bucket counts, sum, count)."""
        out: dict[str, Any] = {"buckets": [], "sum": 0.0, "count": 0.0}
        if self.step_seconds is None:
            return out
        for metric in self.step_seconds.collect():
            for sample in metric.samples:
                if sample.name.endswith("_bucket"):
                    out["buckets"].append([sample.labels["le"], sample.value])
                elif sample.name.endswith("_sum"):
                    out["sum"] = sample.value
                elif sample.name.endswith("_count"):
                    out["count"] = sample.value
        return out

    def instrument(self, controller: Any) -> None:
        """Time every ``controller.step()`` (wraps the bound method once)."""
        if self.step_seconds is None:
            return
        histogram = self.step_seconds
        step: Callable[[], Any] = controller.step
        if getattr(step, "_spotfleet_timed", False):
            return

        @functools.wraps(step)
        def timed() -> Any:
            start = time.perf_counter()
            try:
                return step()
            finally:
                histogram.observe(time.perf_counter() - start)

        timed._spotfleet_timed = True  # type: ignore[attr-defined]
        controller.step = timed

    def render(self) -> bytes:
        return generate_latest(self.registry)


class PublishedHistogram(Collector):
    """Another process's step histogram, from the plain data it last published."""

    def __init__(self, read: Callable[[], dict[str, Any]]) -> None:
        self.read = read

    def collect(self) -> Iterator[Metric]:
        data = self.read() or {}
        buckets = [(str(le), float(n)) for le, n in data.get("buckets", [])]
        if not buckets:
            buckets = [("+Inf", 0.0)]
        yield HistogramMetricFamily(STEP_NAME, STEP_HELP, buckets=buckets, sum_value=float(data.get("sum", 0.0)))
