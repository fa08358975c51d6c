"""Daily spend as stacked bars (by market, or by the report's first grouping),
with the on-demand counterfactual for the same attributed time as a line.

matplotlib runs on the non-interactive Agg backend: no display needed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from spotfleet.ledger.attribution import Line
from spotfleet.ledger.report import GROUPS

MAX_STACKS = 8  # more series than this are folded into "other"


def daily_spend(lines: Iterable[Line], path: Path, *, by: str = "market", title: str = "spotfleet daily spend") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key = GROUPS[by]
    spend: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    od: dict[str, float] = defaultdict(float)
    totals: dict[str, float] = defaultdict(float)
    for ln in lines:
        day = ln.day.isoformat()
        series = key(ln)
        spend[series][day] += ln.cost / 1e6
        od[day] += ln.on_demand / 1e6
        totals[series] += ln.cost / 1e6
    days = sorted(od)
    ranked = sorted(totals, key=lambda s: -totals[s])
    if len(ranked) > MAX_STACKS:
        keep, rest = ranked[: MAX_STACKS - 1], ranked[MAX_STACKS - 1 :]
        other: dict[str, float] = defaultdict(float)
        for s in rest:
            for d, v in spend.pop(s).items():
                other[d] += v
        spend["other"] = other
        ranked = [*keep, "other"]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(days) + 3), 4.5), dpi=110)
    x = list(range(len(days)))
    bottom = [0.0] * len(days)
    for series in ranked:
        heights = [spend[series].get(d, 0.0) for d in days]
        ax.bar(x, heights, bottom=bottom, label=series, width=0.7)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    ax.plot(x, [od[d] for d in days], color="black", marker="o", linewidth=1.5, label="on-demand counterfactual")
    ax.set_xticks(x, days, rotation=45 if len(days) > 6 else 0, ha="right" if len(days) > 6 else "center")
    ax.set_ylabel("USD")
    ax.set_title(f"{title} (stacked by {by})")
    ax.legend(fontsize="small", loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    plt.close(fig)
    return path
