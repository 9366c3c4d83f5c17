"""The evaluation's picture: Pass@k as grouped bars, one group per k, one bar per series (a
retrieval mode, or a mode of one collection when collections are compared), rendered headless
with matplotlib's Agg canvas into PNG bytes."""

from __future__ import annotations

import io
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from situate.tasks.retrieval.evaluation import Comparison

# One colour per retrieval mode (tab10's first four); collections are told apart by hatching.
MODE_COLOURS = {"dense": "#1f77b4", "bm25": "#ff7f0e", "hybrid": "#2ca02c", "rerank": "#d62728"}
HATCHES = ("", "//", "..", "xx", "\\\\", "++", "oo", "--")


def pass_at_k_chart(scores: Mapping[str, Mapping[str, Mapping[str, float]]], ks: Sequence[int],
                    title: str,
                    intervals: Mapping[str, Mapping[str, Mapping[str, Sequence[float]]]] | None = None,
                    differences: Sequence[Comparison] = ()) -> bytes:
    """A PNG of Pass@k (percent) at each k, for each collection and mode (`pass_at_k_figure`)."""
    buf = io.BytesIO()
    pass_at_k_figure(scores, ks, title, intervals, differences).savefig(buf, format="png")
    return buf.getvalue()


def pass_at_k_figure(scores: Mapping[str, Mapping[str, Mapping[str, float]]], ks: Sequence[int],
                     title: str,
                     intervals: Mapping[str, Mapping[str, Mapping[str, Sequence[float]]]] | None = None,
                     differences: Sequence[Comparison] = ()) -> Any:
    """The chart as a matplotlib Figure: Pass@k (percent) at each k, for each collection and mode.

    `scores` is {collection: {mode: {str(k): pass@k}}}: one collection gives one bar per mode at
    each k, several give one bar per (mode, collection), the modes side by side and each
    collection hatched its own way, which is the ablation a user reads to see whether contexts
    pay. `intervals` (the same shape, [low, high]) draws each bar's 95% interval as an error bar;
    `differences` adds a panel of paired differences with their intervals, those whose interval
    covers 0 greyed and marked "n.s." (not significant).
    """
    from matplotlib.figure import Figure  # the object API: no pyplot state, no display needed

    series = [(collection, mode, values) for collection, modes in scores.items()
              for mode, values in modes.items()]
    series.sort(key=lambda s: (list(MODE_COLOURS).index(s[1]) if s[1] in MODE_COLOURS else 99,
                               list(scores).index(s[0])))
    several = len(scores) > 1
    collections = list(scores)
    width_in = max(6.0, 1.2 + 0.45 * len(series) * len(ks))
    height = 4.4 + (0.6 + 0.28 * len(differences) if differences else 0.0)
    fig = Figure(figsize=(width_in, height), dpi=100, layout="constrained")
    if differences:
        ax, dax = fig.subplots(2, 1, height_ratios=[4.4, 0.6 + 0.28 * len(differences)])
    else:
        ax, dax = fig.add_subplot(), None
    width = 0.8 / max(1, len(series))
    for i, (collection, mode, values) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(ks))]
        ys = [float(values.get(str(k), 0.0)) for k in ks]
        label = f"{mode} · {collection}" if several else mode
        span = (intervals or {}).get(collection, {}).get(mode, {})
        err = None
        if span:
            lows = [float(span.get(str(k), (y, y))[0]) for k, y in zip(ks, ys, strict=True)]
            highs = [float(span.get(str(k), (y, y))[1]) for k, y in zip(ks, ys, strict=True)]
            err = [[max(0.0, y - lo) for y, lo in zip(ys, lows, strict=True)],
                   [max(0.0, hi - y) for y, hi in zip(ys, highs, strict=True)]]
        bars = ax.bar(xs, ys, width * 0.95, label=label, color=MODE_COLOURS.get(mode, "#7f7f7f"),
                      hatch=HATCHES[collections.index(collection) % len(HATCHES)] if several else "",
                      edgecolor="white", linewidth=0.5, yerr=err,
                      error_kw={"elinewidth": 0.8, "capsize": 2, "ecolor": "#333333"})
        if len(series) * len(ks) <= 24:
            ax.bar_label(bars, fmt="%.1f", fontsize=7, padding=1)
    ax.set_xticks(range(len(ks)), [f"Pass@{k}" for k in ks])
    ax.set_ylabel("golden chunks found (%)")
    ax.set_ylim(0, 105)
    ax.set_title(textwrap.fill(title, int(width_in * 11), break_on_hyphens=False),  # never cut
                 fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    # Below the axes, where no bar can hide behind it.
    fig.legend(fontsize=8, loc="outside lower center", ncols=min(len(series), 4 if several else 6),
               frameon=False)
    if dax is not None:
        _differences_panel(dax, differences)
    return fig


def _differences_panel(ax: Any, differences: Sequence[Comparison]) -> None:
    """Paired differences (points of Pass@k) with their 95% intervals, one row each; a row whose
    interval covers 0 is grey and says "n.s.". Each row's figures are a column right of the
    panel, where the layout makes room for them (placed after an interval's end, a long one ran
    past the figure's edge)."""
    rows = list(differences)[::-1]  # the first listed on top
    for y, d in enumerate(rows):
        colour = "#2ca02c" if d.significant and d.difference > 0 else (
            "#d62728" if d.significant else "#9e9e9e")
        ax.errorbar([d.difference], [y], xerr=[[d.difference - d.low], [d.high - d.difference]],
                    fmt="o", color=colour, capsize=3, markersize=4)
        note = f"{d.difference:+.2f} [{d.low:+.2f}, {d.high:+.2f}] p={d.p:.3f}"
        ax.annotate(note + ("" if d.significant else "  n.s."), (1.0, y),
                    xycoords=("axes fraction", "data"), xytext=(6, 0), textcoords="offset points",
                    va="center", fontsize=7, color=colour, annotation_clip=False)
    ax.axvline(0, color="#555555", linewidth=0.8)
    ax.set_yticks(range(len(rows)), [f"{d.label} @{d.k}" for d in rows], fontsize=7)
    ax.set_xlabel("paired difference (points of Pass@k), 95% interval; n.s.: covers 0", fontsize=8)
    lo = min((d.low for d in rows), default=-1.0)
    hi = max((d.high for d in rows), default=1.0)
    pad = max(1.0, 0.1 * (hi - lo))
    ax.set_xlim(min(lo, 0) - pad, max(hi, 0) + pad)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.grid(axis="x", alpha=0.3)
