#!/usr/bin/env python3
"""Bar chart of `agoq plan` JSON: per pipeline stage, stacked per-GPU memory of baseline, agoq and planned.

usage: plan_chart.py PLAN.json OUT.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

CATEGORIES = ["weights", "gradients", "optimizer", "activations", "communication", "workspace"]
SYSTEMS = ["baseline", "agoq", "planned"]


def main(argv):
    if len(argv) != 3:
        sys.exit("usage: plan_chart.py PLAN.json OUT.png")
    with open(argv[1]) as f:
        plan = json.load(f)
    stages = plan["stages"]
    gib = float(1 << 30)
    width = 0.27
    fig, ax = plt.subplots(figsize=(max(6, 2.2 * len(stages)), 4.5))
    colors = plt.get_cmap("tab10").colors
    for si, system in enumerate(SYSTEMS):
        xs = [s["stage"] + (si - 1) * width for s in stages]
        bottom = [0.0] * len(stages)
        for ci, cat in enumerate(CATEGORIES):
            vals = [s[system][cat] / gib for s in stages]
            ax.bar(xs, vals, width * 0.95, bottom=bottom, color=colors[ci],
                   label=cat if si == 0 else None, hatch=["", "//", ".."][si], edgecolor="white")
            bottom = [b + v for b, v in zip(bottom, vals)]
        for x, total in zip(xs, bottom):
            ax.text(x, total, system[0].upper(), ha="center", va="bottom", fontsize=7)
    ax.axhline(plan["gpu_mem"] / gib, color="black", linestyle="--", linewidth=1, label="GPU memory")
    m, p = plan["model"], plan["parallel"]
    ax.set_title(f"{m['name']}: TP {p['tp']} x PP {p['pp']} x DP {p['dp']}, ZeRO-1 {'on' if p['zero1'] else 'off'}, "
                 f"seq {plan['workload']['seq']}, mb {plan['workload']['micro_batch']}, "
                 f"m {plan['workload']['num_micro_batches']}  (B baseline, A agoq, P planned)", fontsize=9)
    ax.set_xticks([s["stage"] for s in stages])
    ax.set_xticklabels([f"stage {s['stage']}\n({s['in_flight']} in flight)" for s in stages])
    ax.set_ylabel("GiB per GPU")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(argv[2], dpi=120)


if __name__ == "__main__":
    main(sys.argv)
