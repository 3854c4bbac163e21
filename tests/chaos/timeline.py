"""The campaign's timeline picture: acknowledged sends per second and their latency over time,
each fault window shaded and labelled, each observed failover marked.

Latency is an ok ``send``'s time less its invoke's. Failovers are the nemesis' ``observe`` ops: a
partition's new leader (thin red line), a new active controller (dashed black line).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

from tests.chaos.history import NEMESIS, Op, completions  # noqa: E402

# One distinct colour per fault kind: the ten kinds and the final crash of every node.
FAULT_COLOURS = [matplotlib.colors.to_hex(c) for c in matplotlib.colormaps["tab10"].colors] + ["#000000"]  # type: ignore[attr-defined]


def fault_windows(ops: list[Op]) -> list[tuple[str, float, float]]:
    """(kind, start, stop) of every fault; one never stopped lasts to the end of the history."""
    open_: dict[str, list[float]] = {}
    windows: list[tuple[str, float, float]] = []
    for op in ops:
        if op.process != NEMESIS:
            continue
        if op.f.startswith("start-"):
            open_.setdefault(op.f[6:], []).append(op.time)
        elif op.f.startswith("stop-") and open_.get(op.f[5:]):
            windows.append((op.f[5:], open_[op.f[5:]].pop(0), op.time))
    end = ops[-1].time if ops else 0.0
    windows += [(kind, t, end) for kind, times in open_.items() for t in times]
    return sorted(windows, key=lambda w: w[1])


def draw(ops: list[Op], path: Path, title: str = "") -> None:
    sends = [(invoke, done) for invoke, done in completions(ops) if invoke.f == "send" and done is not None and done.type == "ok"]
    per_second = Counter(int(done.time) for _, done in sends)
    end = int(ops[-1].time) + 1 if ops else 1
    fig, (rate, latency) = plt.subplots(2, 1, figsize=(14, 7), sharex=True)
    rate.plot(range(end), [per_second.get(s, 0) for s in range(end)], color="#08306b", linewidth=0.8)
    rate.set_ylabel("acknowledged / s")
    latency.scatter([done.time for _, done in sends], [(done.time - invoke.time) * 1000 for invoke, done in sends], s=1, color="#08306b", alpha=0.4, linewidths=0)
    latency.set_yscale("log")
    latency.set_ylabel("send latency (ms)")
    latency.set_xlabel("seconds since the campaign began")
    colours: dict[str, str] = {}
    for kind, start, stop in fault_windows(ops):
        colour = colours.setdefault(kind, FAULT_COLOURS[len(colours) % len(FAULT_COLOURS)])
        for ax in (rate, latency):
            ax.axvspan(start, max(stop, start + 0.2), color=colour, alpha=0.3, linewidth=0, label=kind if ax is rate else None)
    for op in ops:
        if op.process == NEMESIS and op.f == "observe" and op.value.get("previous") is not None:
            style = {"color": "black", "linestyle": "--", "linewidth": 0.8} if "controller" in op.value else {"color": "#b2182b", "linewidth": 0.4}
            for ax in (rate, latency):
                ax.axvline(op.time, **style)
    handles, labels = rate.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    rate.legend(unique.values(), unique.keys(), loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, title="faults")
    rate.set_title(title + " — red: new partition leader, dashed: new active controller", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
