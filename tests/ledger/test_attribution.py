"""Ledger invariants and hand-computed examples for attribution and billing."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from spotfleet.ledger import money
from spotfleet.ledger.attribution import AttemptSpan, Phase, Segment, attribute
from spotfleet.ledger.billing import BillingRule

T0 = datetime(2026, 12, 1, 22, 0, tzinfo=UTC)


def seg(start: float, end: float | None, *, price: str = "1.2", od: str = "3.06", gpus: int = 4,
        market: str = "spot", instance: str = "i-1", provider: str = "aws") -> Segment:  # fmt: skip
    return Segment(
        instance_id=instance, provider=provider, region="us-east-1", zone="us-east-1a", instance_type="p3.8xlarge",
        market=market, gpu_count=gpus, price_per_hour=Decimal(price), on_demand_price_per_hour=Decimal(od),
        start=T0 + timedelta(seconds=start), end=None if end is None else T0 + timedelta(seconds=end),
    )  # fmt: skip


def span(job: str, start: float, end: float | None, *, gpus: int = 1, mig: int = 0, attempt: int = 1,
         productive: float | None = None, redone: Fraction = Fraction(0), instance: str = "i-1") -> AttemptSpan:  # fmt: skip
    return AttemptSpan(
        job_id=job, attempt=attempt, node_rank=0, instance_id=instance, gpus=gpus, mig_slices=mig,
        bound_at=T0 + timedelta(seconds=start), ended_at=None if end is None else T0 + timedelta(seconds=end),
        productive_from=None if productive is None else T0 + timedelta(seconds=productive), redone=redone,
        tenant="t", family="f", job_name=job,
    )  # fmt: skip


def by_job(ledger_lines: list) -> dict[str | None, int]:  # type: ignore[type-arg]
    out: dict[str | None, int] = {}
    for line in ledger_lines:
        out[line.job_id] = out.get(line.job_id, 0) + line.cost
    return out


def test_hand_computed_half_instance_for_an_hour() -> None:
    # a 4-GPU spot instance at $1.20/h for exactly one hour; job A holds 2 GPUs all hour,
    # job B holds 1 GPU for the second half hour
    led = attribute([seg(0, 3600)], [span("A", 0, 3600, gpus=2, productive=0), span("B", 1800, 3600, productive=1800)],
                    now=T0 + timedelta(hours=2))  # fmt: skip
    costs = by_job(led.lines)
    assert costs["A"] == 600_000  # 2/4 × $1.20
    assert costs["B"] == 150_000  # 1/4 × $1.20 × 0.5
    assert costs[None] == 450_000  # the rest is idle
    assert led.instances["i-1"].cost == 1_200_000
    od = sum(line.on_demand for line in led.lines if line.job_id == "A")
    assert od == 1_530_000  # same GPU-hours at $3.06/h on-demand
    # the hour crosses no midnight (22:00 → 23:00): one line per job and phase
    assert {(line.job_id, line.phase) for line in led.lines} == {
        ("A", Phase.USEFUL),
        ("B", Phase.USEFUL),
        (None, Phase.IDLE),
    }


def test_billing_minimum_is_charged_once_and_is_idle() -> None:
    # ran 20 s on a per-second/60 s-minimum provider: pays 60 s; 40 s of it is idle
    led = attribute([seg(0, 20, price="3.6", gpus=1)], [span("A", 0, 20, productive=0)], now=T0 + timedelta(hours=1))
    assert led.instances["i-1"].billed_seconds == 60
    assert led.instances["i-1"].cost == 60_000  # $3.60/h × 60 s
    costs = {line.phase: line.cost for line in led.lines}
    assert costs == {Phase.USEFUL: 20_000, Phase.BILLING_MINIMUM: 40_000}


def test_billing_rules_round_up_and_are_per_provider() -> None:
    rule = BillingRule(increment_seconds=60, minimum_seconds=600)
    assert rule.billed_seconds(Fraction(61), closed=True) == 600
    assert rule.billed_seconds(Fraction(601), closed=True) == 660
    assert rule.billed_seconds(Fraction(61), closed=False) == 120  # a live instance: accrued so far, no minimum
    assert BillingRule().billed_seconds(Fraction(1001, 10), closed=True) == 101
    led = attribute([seg(0, 30, gpus=1, provider="acme", price="3.6")], [], now=T0 + timedelta(hours=1),
                    rules={"acme": BillingRule(minimum_seconds=0)})  # fmt: skip
    assert led.instances["i-1"].cost == 30_000


def test_open_segment_counts_to_now_without_minimum() -> None:
    led = attribute(
        [seg(0, None, price="3.6", gpus=1)], [span("A", 0, None, productive=5)], now=T0 + timedelta(seconds=30)
    )
    assert led.instances["i-1"].cost == 30_000
    phases = {line.phase: line.cost for line in led.lines}
    assert phases == {Phase.STARTUP: 5_000, Phase.USEFUL: 25_000}


def test_restart_overhead_and_redone_work() -> None:
    # attempt 2 held 1 of 1 GPU for an hour at $3.60/h: the first 360 s before progress are
    # restart overhead; a quarter of the productive rest was later rolled back and redone
    led = attribute([seg(0, 3600, price="3.6", gpus=1)],
                    [span("A", 0, 3600, attempt=2, productive=360, redone=Fraction(1, 4))],
                    now=T0 + timedelta(hours=2))  # fmt: skip
    phases = {line.phase: line.cost for line in led.lines}
    assert phases == {Phase.RESTART: 360_000, Phase.USEFUL: 2_430_000, Phase.REDONE: 810_000}


def test_mig_slices_share_a_gpu() -> None:
    led = attribute([seg(0, 3600, price="7", gpus=1)], [span("A", 0, 3600, gpus=0, mig=3, productive=0)],
                    now=T0 + timedelta(hours=2))  # fmt: skip
    assert by_job(led.lines) == {"A": 3_000_000, None: 4_000_000}


def test_lines_split_at_midnight_and_cuts() -> None:
    cut = T0 + timedelta(minutes=30)
    led = attribute([seg(0, 4 * 3600, gpus=1)], [span("A", 0, 4 * 3600, productive=0)], now=T0 + timedelta(hours=5),
                    cuts=[cut])  # fmt: skip
    days = sorted({line.day.isoformat() for line in led.lines})
    assert days == ["2026-12-01", "2026-12-02"]
    assert all(not (line.start < cut < line.end) for line in led.lines)
    assert sum(line.cost for line in led.lines) == led.instances["i-1"].cost == 4_800_000


def test_allocate_is_exact_and_deterministic() -> None:
    parts = money.allocate(100, {"a": Fraction(1, 3), "b": Fraction(1, 3), "c": Fraction(1, 3)})
    assert parts == {"a": 34, "b": 33, "c": 33}
    assert money.fmt(1_234_565) == "$1.23"
    assert money.fmt(1_235_000) == "$1.24"


# ------------------------------------------------------------ invariants over random schedules

prices = st.decimals(min_value=Decimal("0.01"), max_value=Decimal("40"), places=4)


@st.composite
def schedules(draw: st.DrawFn) -> tuple[list[Segment], list[AttemptSpan], datetime]:
    segments: list[Segment] = []
    attempts: list[AttemptSpan] = []
    for n in range(draw(st.integers(1, 3))):
        inst = f"i-{n}"
        gpus = draw(st.sampled_from([0, 1, 4, 8]))
        market = draw(st.sampled_from(["spot", "on_demand"]))
        provider = draw(st.sampled_from(["aws", "gcp", "local"]))
        t = draw(st.integers(0, 90_000))
        closed = draw(st.booleans())
        cuts = sorted(draw(st.lists(st.integers(1, 50_000), min_size=1, max_size=4, unique=True)))
        bounds = [t, *(t + c for c in cuts)]
        for i, (a, b) in enumerate(itertools.pairwise(bounds)):  # price changes split segments
            last = i == len(bounds) - 2
            segments.append(seg(a, b if (closed or not last) else None, price=str(draw(prices)), od="41",
                                gpus=gpus, market=market, instance=inst, provider=provider))  # fmt: skip
        free = list(range(max(gpus, 1)))
        for j in range(draw(st.integers(0, 4))):
            if not free:
                break
            want = draw(st.integers(1, len(free))) if gpus else 1
            taken, free = free[:want], free[want:]
            start = draw(st.integers(bounds[0] - 100, bounds[-1]))
            end = draw(st.one_of(st.none(), st.integers(start, bounds[-1] + 100)))
            prod = draw(st.one_of(st.none(), st.integers(start, (end or bounds[-1]) + 1)))
            attempts.append(span(f"job-{n}-{j}", start, end, gpus=len(taken) if gpus else 0, instance=inst,
                                 attempt=draw(st.integers(1, 3)), productive=prod,
                                 redone=Fraction(draw(st.integers(0, 4)), 4)))  # fmt: skip
    now = T0 + timedelta(seconds=draw(st.integers(150_000, 200_000)))
    return segments, attempts, now


@settings(max_examples=150, deadline=None)
@given(schedules())
def test_job_costs_plus_idle_equal_instance_cost_exactly(
    case: tuple[list[Segment], list[AttemptSpan], datetime],
) -> None:
    segments, attempts, now = case
    led = attribute(segments, attempts, now=now)
    assert not led.overfull
    for inst, bill in led.instances.items():
        lines = [line for line in led.lines if line.segment.instance_id == inst]
        jobs = sum(line.cost for line in lines if not line.idle)
        idle = sum(line.cost for line in lines if line.idle)
        assert jobs + idle == bill.cost
        assert all(line.cost >= 0 and line.on_demand >= 0 for line in lines)
        # independently: each segment's price × its billed seconds, rounded once
        segs = sorted((s for s in segments if s.instance_id == inst), key=lambda s: s.start)
        expected = 0
        for i, s in enumerate(segs):
            secs = Fraction(int(((s.end or now) - s.start).total_seconds()))
            if i == len(segs) - 1:
                secs += bill.billed_seconds - bill.used_seconds
            expected += money.cost_micros(s.price_per_hour, secs)
        assert bill.cost == expected
        # nobody pays for more than their GPUs' time, nobody for less (within a micro-dollar per line)
        for a in {line.attempt for line in lines if line.attempt is not None}:
            own = [line for line in lines if line.attempt is a]
            exact = sum(
                (Fraction(line.segment.price_per_hour) * line.seconds * 10**6 / 3600 for line in own), Fraction(0)
            )
            assert abs(sum(line.cost for line in own) - exact) <= 2 * len(own) + 1


def test_redone_fraction_hand_computed() -> None:
    from spotfleet.ledger.usage import AttemptUsage, redone_fraction

    def u(attempt: int, resume: int | None, last: int | None, ckpt: int | None) -> AttemptUsage:
        return AttemptUsage(job_id="j", attempt=attempt, node_rank=0, resume_step=resume, first_progress_at=None,
                            last_step=last, checkpoint_step=ckpt, gpu_samples=0, mean_utilization_pct=None,
                            idle_fraction=0.0, peak_gpu_memory_mib=0.0, gpu_memory_total_mib=0.0)  # fmt: skip

    # 1: 0 → 50, checkpoint at 40, interrupted: steps 40..50 redone = 10/50
    # 2: resumed at 40 → 90, lost with no new checkpoint: 40..90 redone = 50/50
    # 3: failed (not a rollback outcome): nothing counted; 4: the last attempt: nothing after it
    fractions = redone_fraction([
        (1, "interrupted", u(1, None, 50, 40)),
        (2, "lost", u(2, 40, 90, None)),
        (3, "failed", u(3, 40, 60, 60)),
        (4, "succeeded", u(4, 60, 100, 100)),
    ])  # fmt: skip
    assert fractions == {1: Fraction(1, 5), 2: Fraction(1)}
    # checkpointed on the notice exactly where it stopped: nothing redone
    assert redone_fraction([(1, "checkpointed", u(1, None, 70, 70)), (2, "succeeded", u(2, 70, 100, 100))]) == {
        1: Fraction(0)
    }
    # unknown progress: nothing redone
    assert redone_fraction([(1, "interrupted", None), (2, "succeeded", None)]) == {}


def test_time_sliced_fraction_of_a_gpu() -> None:
    # two jobs each asked for a quarter of the one GPU of a $4/h instance for an hour
    a = AttemptSpan(job_id="A", attempt=1, node_rank=0, instance_id="i-1", gpus=1, mig_slices=0, bound_at=T0,
                    ended_at=T0 + timedelta(hours=1), productive_from=T0, gpu_share=0.25)  # fmt: skip
    b = AttemptSpan(job_id="B", attempt=1, node_rank=0, instance_id="i-1", gpus=1, mig_slices=0, bound_at=T0,
                    ended_at=T0 + timedelta(hours=1), productive_from=T0, gpu_share=0.25)  # fmt: skip
    led = attribute([seg(0, 3600, price="4", gpus=1)], [a, b], now=T0 + timedelta(hours=2))
    assert by_job(led.lines) == {"A": 1_000_000, "B": 1_000_000, None: 2_000_000}
    assert sum(line.gpu_seconds for line in led.lines if line.job_id == "A") == 900


def test_failed_attempts_and_their_retries_are_failures_not_interruptions() -> None:
    # attempt 1 runs 100 s and exits non-zero; attempt 2 is bound at 100 s, starts at 130 s,
    # succeeds at 400 s: 100 s + 30 s are the failure's cost, the rest is useful
    from dataclasses import replace

    from spotfleet.ledger.report import build_report

    first = replace(span("A", 0, 100, productive=10), outcome="failed")
    retry = replace(span("A", 100, 400, attempt=2, productive=130), outcome="succeeded", after_failure=True)
    led = attribute([seg(0, 400, price="3.6", gpus=1)], [first, retry], now=T0 + timedelta(hours=1))
    phases: dict[Phase, int] = {}
    for line in led.lines:
        phases[line.phase] = phases.get(line.phase, 0) + line.cost
    assert phases == {Phase.FAILED: 130_000, Phase.USEFUL: 270_000}
    totals = build_report(led.lines, usage={}, now=T0 + timedelta(hours=1), by=[]).totals.figures()
    assert totals["failed_attempts_cost"] == 0.13
    assert totals["interruption_cost"] == 0.0
