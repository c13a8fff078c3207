"""Draw bench/benchmarks.png from bench.compare's results (runs in var/bench-venvs/plot).

``python -m bench.peers.chart results.json out.png``: drain rate at 1/2/4 workers and
enqueue→start p50/p99 for every configuration, medians with min–max error bars.
"""

from __future__ import annotations

import json
import sys

from bench.peers import report


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(sys.argv[1]) as source:
        results = json.load(source)
    out = sys.argv[2]
    s = results.get("summary") or report.summarize(results)
    labels = {key: c["label"] for key, c in results["configs"].items()}
    columns = [c for c in report.COLUMNS if c in results["runs"]]
    workers = [str(w) for w in results["settings"]["workers"]]

    def drain(key: str, w: str):
        if key == "taskforge":
            return report.figure(s, f"tf.drain_{w}") or report.figure(s, f"taskforge.drain_{w}")
        return report.figure(s, f"{key}.drain_{w}")

    def latency(key: str, p: str):
        if key == "taskforge" and p != "p95":
            return report.figure(s, f"tf.latency_{p}") or report.figure(s, f"taskforge.latency_{p}")
        return report.figure(s, f"{key}.latency_{p}")

    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5.5))
    width = 0.8 / max(1, len(workers))
    for i, w in enumerate(workers):
        xs, ys, lo, hi = [], [], [], []
        for j, key in enumerate(columns):
            f = drain(key, w)
            if f:
                xs.append(j + (i - (len(workers) - 1) / 2) * width)
                ys.append(f["median"])
                lo.append(f["median"] - f["min"])
                hi.append(f["max"] - f["median"])
        left.bar(
            xs, ys, width, yerr=[lo, hi], capsize=2, label=f"{w} worker{'s' if w != '1' else ''}"
        )
    left.set_xticks(range(len(columns)), [labels[c] for c in columns], rotation=30, ha="right")
    left.set_ylabel("jobs/s (higher is better)")
    left.set_title("Drain a pre-filled queue of no-op jobs")
    left.legend()
    left.grid(axis="y", alpha=0.3)

    width = 0.38
    for i, p in enumerate(("p50", "p99")):
        xs, ys, lo, hi = [], [], [], []
        for j, key in enumerate(columns):
            f = latency(key, p)
            if f:
                xs.append(j + (i - 0.5) * width)
                ys.append(f["median"])
                lo.append(f["median"] - f["min"])
                hi.append(f["max"] - f["median"])
        right.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=p)
    right.set_yscale("log")
    right.set_xticks(range(len(columns)), [labels[c] for c in columns], rotation=30, ha="right")
    right.set_ylabel("ms, log scale (lower is better)")
    right.set_title("enqueue→start latency, idle workers, jobs 10 ms apart")
    right.legend()
    right.grid(axis="y", alpha=0.3)
    meta = results.get("meta", {})
    fig.suptitle(
        f"TaskForge {meta.get('commit', '')[:10]} and peers · {meta.get('cpus', '?')} cores · "
        f"{meta.get('redis_server', '')} · medians, bars = min–max of {results['settings']['repeat']}"
    )
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
