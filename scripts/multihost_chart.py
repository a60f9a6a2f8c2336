#!/usr/bin/env python3
"""Speed-up of allreduce_q8 over MPI_Allreduce (and of the DP step, when the runs have one) against link rate,
from the JSON of scripts/multihost-bench.sh --json, one file per (hosts, rate) run.

usage: multihost_chart.py OUT.png RUN.json...   (run with /usr/bin/python3: Debian's matplotlib)
"""
import json
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Smaller all-reduces are left out: they fit in tbf's burst (2 ms of the link's rate, scripts/hosts.sh) and partly
# pass at the unshaped speed, so they do not show the link rate.
MIN_MIB = 16


def main(argv):
    if len(argv) < 3:
        sys.exit("usage: multihost_chart.py OUT.png RUN.json...")
    allreduce = defaultdict(list)  # (hosts, size_mib) -> [(rate_bits, speed-up)]
    step = defaultdict(list)  # (hosts, config) -> [(rate_bits, speed-up)]
    for path in argv[2:]:
        with open(path) as f:
            run = json.load(f)
        for r in run.get("results", []):
            if r["size_mib"] < MIN_MIB:
                continue
            allreduce[(r["hosts"], r["size_mib"])].append((r["rate_bits"], r["mpi_ms"] / r["q8_ms"]))
        for c in run.get("e2e", {}).get("configs", [])[1:]:
            step[(run["hosts"], c["name"])].append((run["rate_bits"], c["speedup_vs_fp32"]))
    panels = [(f"allreduce_q8 vs MPI_Allreduce (fp32), >= {MIN_MIB} MiB", allreduce, "{0} hosts, {1} MiB")]
    if step:
        panels.append(("DP training step vs fp32 grads + MPI", step, "{0} hosts: {1}"))
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.5), squeeze=False)
    for ax, (title, series, label) in zip(axes[0], panels):
        for key in sorted(series):
            pts = sorted(series[key])
            ax.plot([p[0] / 1e9 for p in pts], [p[1] for p in pts], marker="o", label=label.format(*key))
        ax.axhline(1.0, color="gray", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("link rate per host (Gbit/s, tc tbf)")
        ax.set_ylabel("speed-up (x)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(argv[1], dpi=110)


if __name__ == "__main__":
    main(sys.argv)
