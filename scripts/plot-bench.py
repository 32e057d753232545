#!/usr/bin/python3
"""Draws a `shoal bench` run from its JSON file (--json) as a PNG.

    scripts/plot-bench.py run.json run.png [--title TEXT]

Panels, over the seconds of the run:
  - throughput: committed/s (and aborts/s; acknowledged/s when replicated);
  - latency: speculative p50/p99 and, when replicated, commit (acknowledged) p50/p99, on a
    log scale.
Runs carry a "series" of per-second samples: in-process runs (`bench tpcc|micro|ycsb`) and runs
across shard processes (`--shards`, `--cluster`; their rows are whole seconds, drawn as steps,
and a second without commits has null percentiles: a gap in the latency lines). Files of runs
across shard processes written before they had a series carry "committed_per_second" only
(throughput, no latency panel). A leader kill (`--kill-leader-at`) is drawn as a vertical line at the kill and
a shaded span until the failed shard's first commit after it (failover_ms), one per kill.

Runs on Debian's python3 with python3-matplotlib (scripts/install-deps.sh), not a pyenv one. Exit status 2 and a message for a
file that is not a bench JSON.
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")  # files only: no display on a server or in CI
import matplotlib.pyplot as plt  # noqa: E402


def fail(message):
    print(f"plot-bench: {message}", file=sys.stderr)
    sys.exit(2)


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            run = json.load(f)
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    except json.JSONDecodeError as e:
        fail(f"{path} is not JSON: {e}")
    if not isinstance(run, dict) or not ("series" in run or "committed_per_second" in run):
        fail(f"{path}: no 'series' or 'committed_per_second': not a shoal bench JSON file "
             "(written by a bench run with --json)")
    return run


def column(series, key):
    # null (a second without samples of that latency): NaN, drawn as a gap.
    return [float("nan") if x.get(key) is None else float(x[key]) for x in series]


def mark_failover(axes, run):
    # Several kills (`--kill-leader-at 4,9`): the JSON's `kills`, one object each; older runs
    # have only `failover` and `failover_ms` (the first kill).
    kills = run.get("kills")
    if not isinstance(kills, list):
        failover = run.get("failover")
        if not isinstance(failover, dict):
            return
        kills = [dict(failover, failover_ms=run.get("failover_ms"))]
    for i, kill in enumerate(k for k in kills if isinstance(k, dict) and k.get("killed")):
        kill_s = float(kill.get("killed_at_s", 0))
        failover_ms = kill.get("failover_ms")
        for ax in axes:
            ax.axvline(kill_s, color="red", linestyle="--", linewidth=1)
            if isinstance(failover_ms, (int, float)) and failover_ms > 0:
                ax.axvspan(kill_s, kill_s + failover_ms / 1000.0, color="red", alpha=0.15)
        label = f"leader of shard {kill.get('shard', '?')} killed"
        if isinstance(failover_ms, (int, float)):
            label += f"; failover {failover_ms:.0f} ms"
        axes[0].annotate(label, xy=(kill_s, 1.0), xycoords=("data", "axes fraction"),
                         xytext=(4, -12 - 10 * i), textcoords="offset points", color="red",
                         fontsize=8)


def plot(run, out_path, title):
    series = run.get("series")
    has_series = isinstance(series, list) and len(series) > 0
    rows = 2 if has_series else 1
    fig, axes = plt.subplots(rows, 1, figsize=(9, 3.2 * rows), sharex=True, squeeze=False)
    axes = [a[0] for a in axes]
    tput = axes[0]
    if has_series:
        t = column(series, "t_s")
        # Across shard processes (the file also has committed_per_second): row i is the second
        # (i, i + 1], drawn as steps back from its end, from 0 (as committed_per_second was).
        steps = "committed_per_second" in run
        style = {"drawstyle": "steps-pre"} if steps else {}

        def draw(ax, key, **kwargs):
            values = column(series, key)
            if steps:
                ax.plot([0.0] + t, values[:1] + values, **style, **kwargs)
            else:
                ax.plot(t, values, **kwargs)

        draw(tput, "committed_per_sec", label="committed/s")
        draw(tput, "aborts_per_sec", label="aborts/s", linewidth=0.8)
        replicated = "acked_per_sec" in series[0]
        if replicated:
            draw(tput, "acked_per_sec", label="acknowledged/s", linewidth=0.8)
        lat = axes[1]
        draw(lat, "latency_p50_us", label="speculative p50")
        draw(lat, "latency_p99_us", label="speculative p99")
        if replicated:
            draw(lat, "commit_latency_p50_us", label="commit p50")
            draw(lat, "commit_latency_p99_us", label="commit p99")
        lat.set_yscale("log")
        lat.set_ylabel("latency (us)")
        lat.legend(loc="upper right", fontsize=8)
        lat.grid(True, which="both", alpha=0.3)
        warmup_end = max((x["t_s"] for x in series if x.get("warmup")), default=None)
        if warmup_end is not None:
            for ax in axes:
                ax.axvspan(0, warmup_end, color="grey", alpha=0.15)
    else:
        # Entry i is second i + 1, the interval (i, i + 1]: steps drawn back from their end,
        # from 0 (without that first point the first second was drawn as no width at all).
        per_second = [float(v) for v in run["committed_per_second"]]
        seconds = list(range(len(per_second) + 1)) if per_second else []  # none: empty axes
        tput.plot(seconds, per_second[:1] + per_second, label="committed/s",
                  drawstyle="steps-pre")
    tput.set_ylabel("transactions/s")
    tput.set_ylim(bottom=0)
    tput.legend(loc="lower right", fontsize=8)
    tput.grid(True, alpha=0.3)
    axes[-1].set_xlabel("seconds from start")
    mark_failover(axes, run)
    if not title:
        title = f"shoal bench {run.get('workload', '')}"
        if run.get("shards"):
            title += f", {run['shards']} shards"
        # In-process runs: replication.replicas; across shard processes: replicas.
        replication = run.get("replication")
        replicas = replication.get("replicas") if isinstance(replication, dict) else None
        replicas = run.get("replicas") if replicas is None else replicas
        if isinstance(replicas, int) and replicas > 1:
            title += f", {replicas} replicas"
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)
    return "throughput and latency" if has_series else "throughput"


def main():
    parser = argparse.ArgumentParser(description="Plot a shoal bench JSON file.")
    parser.add_argument("json_path")
    parser.add_argument("png_path")
    parser.add_argument("--title", default="")
    args = parser.parse_args()
    panels = plot(load(args.json_path), args.png_path, args.title)
    print(f"plot-bench: wrote {args.png_path} ({panels})")


if __name__ == "__main__":
    main()
