"""The evaluation's picture: Pass@k as grouped bars, one group per k, one bar per series (a
retrieval mode, or a mode of one collection when collections are compared), rendered headless
with matplotlib's Agg canvas into PNG bytes."""

from __future__ import annotations

import io
import textwrap
from collections.abc import Mapping, Sequence

# One colour per retrieval mode (tab10's first four); collections are told apart by hatching.
MODE_COLOURS = {"dense": "#1f77b4", "bm25": "#ff7f0e", "hybrid": "#2ca02c", "rerank": "#d62728"}
HATCHES = ("", "//", "..", "xx", "\\\\", "++", "oo", "--")


def pass_at_k_chart(scores: Mapping[str, Mapping[str, Mapping[str, float]]], ks: Sequence[int],
                    title: str) -> bytes:
    """A PNG of Pass@k (percent) at each k, for each collection and mode.

    `scores` is {collection: {mode: {str(k): pass@k}}}: one collection gives one bar per mode at
    each k, several give one bar per (mode, collection), the modes side by side and each
    collection hatched its own way, which is the ablation a user reads to see whether contexts
    pay.
    """
    from matplotlib.figure import Figure  # the object API: no pyplot state, no display needed

    series = [(collection, mode, values) for collection, modes in scores.items()
              for mode, values in modes.items()]
    series.sort(key=lambda s: (list(MODE_COLOURS).index(s[1]) if s[1] in MODE_COLOURS else 99,
                               list(scores).index(s[0])))
    several = len(scores) > 1
    collections = list(scores)
    width_in = max(6.0, 1.2 + 0.45 * len(series) * len(ks))
    fig = Figure(figsize=(width_in, 4.4), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(series))
    for i, (collection, mode, values) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(ks))]
        ys = [float(values.get(str(k), 0.0)) for k in ks]
        label = f"{mode} · {collection}" if several else mode
        bars = ax.bar(xs, ys, width * 0.95, label=label, color=MODE_COLOURS.get(mode, "#7f7f7f"),
                      hatch=HATCHES[collections.index(collection) % len(HATCHES)] if several else "",
                      edgecolor="white", linewidth=0.5)
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
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
