"""Results of `make bench`: medians, ratios, results.json, results.md and PNG charts.

python -m benchmarks.report [--out benchmarks/results]   # rebuild .md and .png from results.json
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

BROKERS = ("kbroker", "tansu")
LABEL = {"kbroker": "kbroker", "tansu": "Tansu"}
PHASE_FIELDS = (
    "seconds",
    "records_per_s",
    "mb_per_s",
    "broker_cpu_pct",
    "client_cpu_pct",
    "broker_peak_rss_bytes",
    "join_seconds",
    "members_ready_seconds",
)
RATIO_FIELDS = (
    "records_per_s",
    "mb_per_s",
    "broker_cpu_pct",
    "client_cpu_pct",
    "broker_peak_rss_bytes",
    "join_seconds",
)


def _median(values: list[Any]) -> float | None:
    nums = [
        v
        for v in values
        if isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)
    ]
    return statistics.median(nums) if nums else None


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def _workload_sort_key(w: str) -> tuple[int, str]:
    head = str(w).split(".", 1)[0]
    return (int(head), str(w)) if head.isdigit() else (99, str(w))


def aggregate_phases(raw: list[dict]) -> list[dict]:
    order: list[tuple[str, str]] = []
    groups: dict[tuple[str, str], dict[str, list[dict]]] = {}
    titles: dict[str, str] = {}
    for row in raw:
        key = (str(row["workload"]), row["phase"])
        if key not in groups:
            order.append(key)
            groups[key] = {}
        groups[key].setdefault(row["broker"], []).append(row)
        titles[key[0]] = row.get("title", key[0])
    out = []
    for key in sorted(order, key=lambda k: (_workload_sort_key(k[0]), order.index(k))):
        entry: dict[str, Any] = {
            "workload": key[0],
            "title": titles[key[0]],
            "phase": key[1],
            "brokers": {},
            "ratio": {},
        }
        for broker, rows in groups[key].items():
            ok = [r for r in rows if "error" not in r]
            errors = sorted({r["error"] for r in rows if "error" in r})
            entry["brokers"][broker] = {
                "runs": len(rows),
                "runs_ok": len(ok),
                "median": {f: _median([r.get(f) for r in ok]) for f in PHASE_FIELDS}
                if ok
                else None,
                "errors": errors,
                "skipped": bool(rows)
                and all(r.get("skipped") for r in rows if "error" in r)
                and not ok,
            }
        k, t = entry["brokers"].get("kbroker"), entry["brokers"].get("tansu")
        if k and t and k["median"] and t["median"]:
            entry["ratio"] = {
                f: _ratio(k["median"][f], t["median"][f]) for f in RATIO_FIELDS
            }
        out.append(entry)
    return out


def aggregate_metrics(raw: list[dict]) -> list[dict]:
    order: list[tuple[str, str, str, str]] = []
    groups: dict[tuple[str, str, str, str], dict[str, list[dict]]] = {}
    for row in raw:
        key = (
            str(row.get("workload_id", "")),
            str(row.get("workload", "")),
            str(row.get("metric", "")),
            str(row.get("unit", "")),
        )
        if key not in groups:
            order.append(key)
            groups[key] = {}
        groups[key].setdefault(row["broker"], []).append(row)
    out = []
    for key in sorted(order, key=lambda k: (_workload_sort_key(k[0]), order.index(k))):
        entry: dict[str, Any] = {
            "workload_id": key[0],
            "workload": key[1],
            "metric": key[2],
            "unit": key[3],
            "brokers": {},
        }
        for broker, rows in groups[key].items():
            entry["brokers"][broker] = {
                "value": _median([r.get("value") for r in rows if "error" not in r]),
                "errors": sorted({r["error"] for r in rows if "error" in r}),
                "notes": sorted({str(r["note"]) for r in rows if r.get("note")}),
                "rows": len(rows),
            }
        k, t = entry["brokers"].get("kbroker"), entry["brokers"].get("tansu")
        entry["ratio"] = _ratio(k["value"], t["value"]) if k and t else None
        out.append(entry)
    return out


# -- formatting --------------------------------------------------------------------------------


def fmt_rate(v: float) -> str:
    if v >= 1e6:
        return f"{v / 1e6:.2f}M"
    if v >= 1e4:
        return f"{v / 1e3:.0f}k"
    if v >= 1e3:
        return f"{v / 1e3:.1f}k"
    return f"{v:.0f}"


def fmt_num(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    if abs(v) >= 0.1:
        return f"{v:.2f}"
    return f"{v:.3g}"


FORMATTERS = {
    "records_per_s": fmt_rate,
    "mb_per_s": fmt_num,
    "broker_cpu_pct": lambda v: f"{v:.0f}",
    "client_cpu_pct": lambda v: f"{v:.0f}",
    "broker_peak_rss_bytes": lambda v: f"{v / 1e6:.0f}",
    "join_seconds": lambda v: f"{v:.2f}",
}


def _placeholder(info: dict | None, key: str, broker: str) -> str | None:
    """What a cell shows for a broker without a figure: – (not run), n/s (the peer lacks it) or failed."""
    if info is None:
        return "–"
    if info[key] is None:
        return "n/s" if broker == "tansu" else "failed"
    return None


def _cell(entry: dict, field: str, brokers: list[str]) -> str:
    values = []
    for b in brokers:
        info = entry["brokers"].get(b)
        placeholder = _placeholder(info, "median", b)
        if placeholder is None:
            v = info["median"].get(field)
            placeholder = "" if v is None else FORMATTERS[field](v)
        values.append(placeholder)
    if all(v in ("", "–") for v in values):
        return ""
    text = " / ".join(values)
    r = entry.get("ratio", {}).get(field)
    if len(brokers) == 2 and r is not None:
        text += f" ({r:.2f}×)"
    return text


def _runs_note(entry: dict, brokers: list[str]) -> str:
    notes = []
    for b in brokers:
        info = entry["brokers"].get(b)
        if info and info["median"] is not None and info["runs_ok"] < info["runs"]:
            notes.append(f"{LABEL[b]} {info['runs_ok']}/{info['runs']} runs ok")
    return f" ({'; '.join(notes)})" if notes else ""


def storage_note(results: dict) -> str:
    brokers = results["options"]["brokers"]
    parts = []
    if "kbroker" in brokers:
        parts.append(
            "kbroker runs its default configuration: records written to disk (a temporary log.dirs; page-cache durability, "
            "no fsync per batch, as Kafka), CRC32C checked on every batch"
        )
    if "tansu" in brokers:
        parts.append(
            f"Tansu ({results['versions'].get('tansu') or 'tansu'}) runs with `--storage-engine memory://tansu/`: **it keeps every record in memory, nothing goes to disk**"
        )
    return "; ".join(parts) + "."


def markdown(results: dict) -> str:
    brokers = [b for b in BROKERS if b in results["options"]["brokers"]]
    heads = " / ".join(LABEL[b] for b in brokers)
    phases = results["phases"]
    metrics = results["metrics"]
    v = results["versions"]
    opts = results["options"]
    lines = [
        f"# kbroker{' vs Tansu' if 'tansu' in brokers else ''}: `make bench`, {results['date']}",
        "",
        f"Machine: {results['machine']['line']}. Broker and client share these cores, on loopback.",
        f"Clients: confluent-kafka {v.get('confluent_kafka')} (librdkafka {v.get('librdkafka')}), kafka-python {v.get('kafka_python')}; "
        f"Python {v.get('python')}; kbroker commit {v.get('kbroker_commit')}.",
        f"Median of {opts['runs']} run{'s' if opts['runs'] != 1 else ''} (workloads 1–4, 8: a fresh broker per run), record counts × {opts['scale']}; total {results['duration_s']:.0f} s.",
        "",
    ]
    if phases:
        lines += [
            "## Throughput (workloads 1–4, 8)",
            "",
            storage_note(results),
            "",
            f"Each cell: {heads}"
            + (" (ratio kbroker ÷ Tansu)." if len(brokers) == 2 else "."),
            "`n/s` = not supported by the peer (errors below).",
            "",
            "| workload | phase | records/s | MB/s | broker CPU % | client CPU % | broker peak RSS MB | join s |",
            "|---|---|---|---|---|---|---|---|",
        ]
        last = None
        for e in phases:
            title = e["title"] if e["title"] != last else ""
            last = e["title"]
            cells = [
                _cell(e, f, brokers)
                for f in (
                    "records_per_s",
                    "mb_per_s",
                    "broker_cpu_pct",
                    "client_cpu_pct",
                    "broker_peak_rss_bytes",
                    "join_seconds",
                )
            ]
            lines.append(
                f"| {title} | {e['phase']}{_runs_note(e, brokers)} | "
                + " | ".join(cells)
                + " |"
            )
        lines += [
            "",
            "- records/s and MB/s: over the phase (MB = 10⁶ bytes of key + value, before compression). CPU %: CPU seconds over "
            "the phase ÷ wall seconds (100 = one core; the broker from /proc/PID/stat, the client is this harness process, "
            "all its threads, from getrusage). Peak RSS: the broker's VmHWM, reset at the start of each phase.",
            "- Producers: acks=1, linger.ms=5, librdkafka defaults otherwise (no idempotence). Consumers read from offset 0 with "
            "fetch.queue.backoff.ms=0; the row marked *default fetch.queue.backoff.ms* keeps librdkafka's 1000 ms.",
            "- Workload 3: 1 KiB JSON-like text records (4,096 distinct; zstd about 3.3×, lz4 about 2×), 1 partition; the broker stores and serves the "
            "compressed batches.",
            "- Workload 4: three consumers (threads of the harness) subscribe at once with client defaults (session.timeout.ms "
            "45000); the rate counts from the group's first record, and *join s* is subscribe() → first record. "
            "group.initial.rebalance.delay.ms stays at kbroker's default 3000 ms: Tansu has no equivalent setting. Tansu holds "
            "the JoinGroup for about half the session timeout.",
            "- Workload 8: kafka-python (pure Python) for workload 1, `enable_idempotence=False`; report only.",
        ]
        problems = []
        for e in phases:
            for b in brokers:
                info = e["brokers"].get(b)
                if info and info["errors"] and not info.get("skipped"):
                    who = (
                        "not supported by the peer"
                        if b == "tansu"
                        else "kbroker failed"
                    )
                    for err in info["errors"]:
                        if err.startswith("skipped"):
                            continue
                        problems.append(
                            f"- {e['title']}, {e['phase']} ({LABEL[b]}, {info['runs'] - info['runs_ok']}/{info['runs']} runs): {who}: `{err}`"
                        )
        if problems:
            lines += ["", "### Errors", "", *problems]
    if metrics:
        lines += [
            "",
            "## Latency, scale, connections (workloads 5–7)",
            "",
            storage_note(results),
            "",
            f"| workload | metric | unit | {' | '.join(LABEL[b] for b in brokers)} |"
            + (" kbroker ÷ Tansu |" if len(brokers) == 2 else ""),
            "|---|---|---|"
            + "---|" * len(brokers)
            + ("---|" if len(brokers) == 2 else ""),
        ]
        errs: list[str] = []
        notes: dict[str, list[str]] = {}
        last_w = None
        for m in metrics:
            wname = (
                f"{m['workload_id']}. {m['workload']}"
                if m["workload_id"]
                else m["workload"]
            )
            shown_w = wname if wname != last_w else ""
            last_w = wname
            marks = ""
            for b in brokers:
                for note in (m["brokers"].get(b) or {}).get("notes", []):
                    text = f"{LABEL[b]}: {note}"
                    notes.setdefault(text, [])
                    marks += (
                        ""
                        if f"[{list(notes).index(text) + 1}]" in marks
                        else f" [{list(notes).index(text) + 1}]"
                    )
            vals = []
            for b in brokers:
                info = m["brokers"].get(b)
                placeholder = _placeholder(info, "value", b)
                if placeholder is None:
                    vals.append(fmt_num(info["value"]))
                    continue
                vals.append(placeholder)
                if info is not None:
                    who = "not supported by the peer" if b == "tansu" else "failed"
                    errs += [
                        f"- {wname}, {m['metric']} ({LABEL[b]}, {who}): `{err}`"
                        for err in info["errors"]
                    ]
            ratio = (
                [f"{m['ratio']:.2f}×" if m["ratio"] is not None else ""]
                if len(brokers) == 2
                else []
            )
            lines.append(
                f"| {shown_w} | {m['metric']}{marks} | {m['unit']} | "
                + " | ".join(vals + ratio)
                + " |"
            )
        if notes:
            lines += [
                "",
                *[
                    f"[{i}] {text}" + ("  " if i < len(notes) else "")
                    for i, text in enumerate(notes, 1)
                ],
            ]
        if errs:
            lines += ["", "Errors:", "", *errs]
    if results.get("missing_modules"):
        lines += [
            "",
            "Not run (module not present): "
            + ", ".join(f"`{m}`" for m in results["missing_modules"])
            + ".",
        ]
    return "\n".join(lines) + "\n"


# -- charts ------------------------------------------------------------------------------------

COLORS = {"kbroker": "#3b6fb6", "tansu": "#d9822b"}
OWN_CHARTS = (
    "throughput_records.png",
    "throughput_mb.png",
    "broker_cpu.png",
    "client_cpu.png",
    "broker_rss.png",
    "workload_*.png",
)


def _bar_chart(
    path: Path,
    title: str,
    labels: list[str],
    series: dict[str, list[float | None]],
    xlabel: str,
    ratios: list[float | None] | None = None,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(labels)
    names = [b for b in BROKERS if b in series]
    height = 0.8 / max(1, len(names))
    fig, ax = plt.subplots(figsize=(10, 0.5 * n * max(1, len(names)) * 0.6 + 1.6))
    for i, b in enumerate(names):
        ys = [j + i * height for j in range(n)]
        vals = [v if v is not None else 0 for v in series[b]]
        bars = ax.barh(ys, vals, height=height, color=COLORS[b], label=LABEL[b])
        for bar, v in zip(bars, series[b]):
            if v is None:
                ax.text(
                    0,
                    bar.get_y() + bar.get_height() / 2,
                    " n/s",
                    va="center",
                    fontsize=7,
                    color="gray",
                )
    if ratios:
        xmax = ax.get_xlim()[1]
        for j, r in enumerate(ratios):
            if r is not None:
                ax.text(
                    xmax * 1.01,
                    j + height * (len(names) - 1) / 2,
                    f"{r:.2f}×",
                    va="center",
                    fontsize=7,
                )
    ax.set_yticks([j + height * (len(names) - 1) / 2 for j in range(n)])
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _metrics_chart(path: Path, ms: list[dict], brokers: list[str], memo: str) -> None:
    """One PNG for one of workloads 5-7: a panel per unit, a pair of bars per metric."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    units: dict[str, list[dict]] = {}
    for m in ms:
        units.setdefault(m["unit"], []).append(m)
    heights = [max(1.2, 0.32 * len(g) * len(brokers) + 0.8) for g in units.values()]
    fig, axes = plt.subplots(
        len(units),
        1,
        figsize=(11, sum(heights) + 0.8),
        gridspec_kw={"height_ratios": heights},
        squeeze=False,
    )
    h = 0.8 / len(brokers)
    for ax, (unit, group) in zip(axes[:, 0], units.items()):
        labels = [
            f"{m['workload']}: {m['metric']}"
            if len({x["workload"] for x in ms}) > 1
            else m["metric"]
            for m in group
        ]
        for i, b in enumerate(brokers):
            vals = [(m["brokers"].get(b) or {}).get("value") for m in group]
            ax.barh(
                [j + i * h for j in range(len(group))],
                [v or 0 for v in vals],
                height=h,
                color=COLORS[b],
                label=LABEL[b],
            )
        ax.set_yticks([j + h * (len(brokers) - 1) / 2 for j in range(len(group))])
        ax.set_yticklabels([lbl[:70] for lbl in labels], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(unit, fontsize=8)
        ax.grid(axis="x", alpha=0.3)
        if len(brokers) == 2:
            xmax = ax.get_xlim()[1]
            for j, m in enumerate(group):
                if m["ratio"] is not None:
                    ax.text(
                        xmax * 1.01,
                        j + h / 2,
                        f"{m['ratio']:.2f}×",
                        va="center",
                        fontsize=7,
                    )
    axes[0, 0].legend(fontsize=8, loc="lower right")
    title = (
        f"Workload {ms[0]['workload_id']}: {ms[0]['workload']}"
        if ms[0]["workload_id"]
        else ms[0]["workload"]
    )
    fig.suptitle(title + memo, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def charts(results: dict, out: Path) -> list[Path]:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return []
    paths: list[Path] = []
    phases = results["phases"]
    brokers = [b for b in BROKERS if b in results["options"]["brokers"]]
    memo = " (Tansu: in memory; kbroker: on disk)" if "tansu" in brokers else ""
    if phases:
        labels = [f"w{e['workload']} {e['phase']}" for e in phases]

        def series(field: str, scale: float = 1.0) -> dict[str, list[float | None]]:
            out_: dict[str, list[float | None]] = {}
            for b in brokers:
                col = []
                for e in phases:
                    info = e["brokers"].get(b)
                    v = info["median"].get(field) if info and info["median"] else None
                    col.append(None if v is None else v / scale)
                out_[b] = col
            return out_

        def ratios(field: str) -> list[float | None]:
            return [e.get("ratio", {}).get(field) for e in phases]

        specs = [
            (
                "throughput_records.png",
                "Records/s, median" + memo,
                "records_per_s",
                1e3,
                "thousand records/s",
            ),
            (
                "throughput_mb.png",
                "MB/s (key + value before compression), median" + memo,
                "mb_per_s",
                1.0,
                "MB/s",
            ),
            (
                "broker_cpu.png",
                "Broker CPU % over the phase (100 = one core)",
                "broker_cpu_pct",
                1.0,
                "% of one core",
            ),
            (
                "client_cpu.png",
                "Client (harness) CPU % over the phase",
                "client_cpu_pct",
                1.0,
                "% of one core",
            ),
            (
                "broker_rss.png",
                "Broker peak RSS (VmHWM) per phase" + memo,
                "broker_peak_rss_bytes",
                1e6,
                "MB",
            ),
        ]
        for name, title, field, scale, xlabel in specs:
            p = out / name
            _bar_chart(
                p,
                title,
                labels,
                series(field, scale),
                xlabel,
                ratios(field) if len(brokers) == 2 else None,
            )
            paths.append(p)
    metrics = [
        m
        for m in results["metrics"]
        if any(i["value"] is not None for i in m["brokers"].values())
    ]
    by_workload: dict[str, list[dict]] = {}
    for m in metrics:
        if m["unit"] in ("bool", "count"):
            continue
        by_workload.setdefault(m["workload_id"] or m["workload"], []).append(m)
    for wid, ms in by_workload.items():
        p = out / f"workload_{''.join(c if c.isalnum() else '_' for c in wid)}.png"
        _metrics_chart(p, ms, brokers, memo)
        paths.append(p)
    return paths


def write_all(results: dict, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    results["phases"] = aggregate_phases(results.get("raw_phases", []))
    results["metrics"] = aggregate_metrics(results.get("raw_metrics", []))
    for (
        pattern
    ) in OWN_CHARTS:  # charts of an earlier run (only ours: others keep files here too)
        for old in out.glob(pattern):
            old.unlink()
    paths = [out / "results.json", out / "results.md"]
    paths[0].write_text(json.dumps(results, indent=1, default=str) + "\n")
    paths[1].write_text(markdown(results))
    return paths + charts(results, out)


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--out", default=str(Path(__file__).resolve().parent / "results")
    )
    args = parser.parse_args()
    out = Path(args.out)
    results = json.loads((out / "results.json").read_text())
    for p in write_all(results, out):
        print(p)


if __name__ == "__main__":
    main()
