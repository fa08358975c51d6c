"""Compare two versions of a policy start by start: the per-run files that
``bench/policy_cost.py --runs-out`` writes.

    python bench/policy_cost.py --traces ../shared/data/traces/aws-v100-2023-02 --subsets 3 --starts 10 \\
        --policies spotfleet --processes 2 --runs-out before.jsonl
    # change the policy, run the same command with --runs-out after.jsonl, then
    python bench/compare_runs.py before.jsonl after.jsonl --policy spotfleet

Why: a mean over subsets hides how a change got there. The held-out rule
(docs/simulator.md, "Held-out sets") keeps a change only if it does not make
the held-out sets dearer, and a mean that barely moves can be many starts
dearer and as many cheaper. For the runs both files hold (same subset, policy
and start tick) it prints how many got dearer and cheaper by more than
``--tolerance`` (relative), the total dollars, the mean and worst subset
ratio of each side over those runs, the misses, and the starts that changed
most; then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

Key = tuple[str, str, int]  # (zones, policy, start tick)


@dataclass(frozen=True, slots=True)
class RunRow:
    cost: float
    optimal_cost: float | None
    missed: bool


def load_runs(path: Path) -> dict[Key, RunRow]:
    """The runs of one ``--runs-out`` file, by (zones, policy, start tick).
    Raises ValueError naming the line of a malformed one."""
    rows: dict[Key, RunRow] = {}
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            key = (str(d["zones"]), str(d["policy"]), int(d["start_tick"]))
            opt = d.get("optimal_cost")
            rows[key] = RunRow(float(d["cost"]), None if opt is None else float(opt), bool(d["missed"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{n}: not a run of bench/policy_cost.py --runs-out ({exc})") from None
    return rows


@dataclass(frozen=True, slots=True)
class Comparison:
    runs: int
    dearer: int
    cheaper: int
    total_before: float
    total_after: float
    mean_ratio_before: float | None
    mean_ratio_after: float | None
    worst_subset_before: float | None
    worst_subset_after: float | None
    misses_before: int
    misses_after: int
    biggest: list[tuple[Key, float, float]]  # (run, cost before, cost after), largest |change| first


def compare(before: dict[Key, RunRow], after: dict[Key, RunRow], *, policy: str | None, tolerance: float,
            top: int = 5) -> Comparison:  # fmt: skip
    """The runs both sides hold (of ``policy`` when given), compared one by one.
    Subset ratios are mean cost over the optimum's mean cost on the same starts,
    as ``policy_cost.summarize_subsets`` computes them (None without optimum costs)."""
    keys = sorted(k for k in before.keys() & after.keys() if policy is None or k[1] == policy)
    dearer = sum(after[k].cost > before[k].cost * (1 + tolerance) for k in keys)
    cheaper = sum(after[k].cost < before[k].cost * (1 - tolerance) for k in keys)
    biggest = sorted(keys, key=lambda k: abs(after[k].cost - before[k].cost), reverse=True)[:top]

    def subset_ratios(side: dict[Key, RunRow]) -> list[float]:
        groups: dict[tuple[str, str], list[RunRow]] = {}
        for k in keys:
            groups.setdefault((k[0], k[1]), []).append(side[k])
        ratios = []
        for rows in groups.values():
            opts = [r.optimal_cost for r in rows]
            if any(o is None for o in opts):
                return []
            ratios.append(statistics.fmean(r.cost for r in rows) / statistics.fmean(o for o in opts if o is not None))
        return ratios

    rb, ra = subset_ratios(before), subset_ratios(after)
    return Comparison(
        runs=len(keys), dearer=dearer, cheaper=cheaper,
        total_before=sum(before[k].cost for k in keys), total_after=sum(after[k].cost for k in keys),
        mean_ratio_before=statistics.fmean(rb) if rb else None, mean_ratio_after=statistics.fmean(ra) if ra else None,
        worst_subset_before=max(rb) if rb else None, worst_subset_after=max(ra) if ra else None,
        misses_before=sum(before[k].missed for k in keys), misses_after=sum(after[k].missed for k in keys),
        biggest=[(k, before[k].cost, after[k].cost) for k in biggest],
    )  # fmt: skip


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path, help="runs file of the version compared against")
    parser.add_argument("after", type=Path, help="runs file of the changed version")
    parser.add_argument("--policy", default=None, help="compare this policy's runs only (default: every policy)")
    parser.add_argument("--tolerance", type=float, default=0.001,
                        help="relative change below which a run counts as unchanged (default 0.001)")  # fmt: skip
    parser.add_argument("--top", type=int, default=5, help="how many of the most changed starts to list")
    args = parser.parse_args(argv)
    if not 0 <= args.tolerance < 1:
        parser.error(f"--tolerance {args.tolerance:g}: give a relative change in [0, 1), e.g. 0.001")
    try:
        before, after = load_runs(args.before), load_runs(args.after)
    except OSError as exc:
        parser.error(f"cannot read {exc.filename}: {exc.strerror}")
    except ValueError as exc:
        parser.error(str(exc))
    c = compare(before, after, policy=args.policy, tolerance=args.tolerance, top=args.top)
    if c.runs == 0:
        print("no run is in both files" + (f" for policy {args.policy!r}" if args.policy else ""), file=sys.stderr)
        return 1
    print(f"{c.runs} runs in both files: {c.dearer} dearer, {c.cheaper} cheaper, "
          f"{c.runs - c.dearer - c.cheaper} unchanged (±{args.tolerance:.1%})")  # fmt: skip
    print(f"total ${c.total_before:,.2f} → ${c.total_after:,.2f} ({c.total_after - c.total_before:+,.2f})")
    print(f"mean subset ratio {_ratio(c.mean_ratio_before)} → {_ratio(c.mean_ratio_after)}, "
          f"worst subset {_ratio(c.worst_subset_before)} → {_ratio(c.worst_subset_after)}, "
          f"misses {c.misses_before} → {c.misses_after}")  # fmt: skip
    if c.biggest:
        print("\nmost changed (zones, policy, start tick: before → after):")
        for (zones, policy, tick), b, a in c.biggest:
            print(f"  {zones} {policy} {tick}: ${b:,.2f} → ${a:,.2f} ({a - b:+,.2f})")
    print(json.dumps({
        "runs": c.runs, "dearer": c.dearer, "cheaper": c.cheaper, "total_before": round(c.total_before, 4),
        "total_after": round(c.total_after, 4), "mean_ratio_before": _round(c.mean_ratio_before),
        "mean_ratio_after": _round(c.mean_ratio_after), "worst_subset_before": _round(c.worst_subset_before),
        "worst_subset_after": _round(c.worst_subset_after), "misses_before": c.misses_before,
        "misses_after": c.misses_after, "policy": args.policy, "tolerance": args.tolerance,
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
