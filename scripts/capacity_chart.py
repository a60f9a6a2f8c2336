#!/usr/bin/python3
"""Chart of `agoq bench capacity`: usage: capacity_chart.py CAPACITY.json OUT.png (python3-matplotlib)."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    j = json.load(open(sys.argv[1]))
    rows = j["rows"]
    budget = j["budget_bytes"] / 2**30
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    for ax, search, key, label in ((axes[0], "layers", "params", "parameters (M)"),
                                   (axes[1], "seq", "seq", "sequence length (tokens)")):
        rs = [r for r in rows if r["search"] == search]
        vals = [r[key] / (1e6 if key == "params" else 1) for r in rs]
        ax.bar([r["system"] for r in rs], vals, color=["tab:gray", "tab:green"])
        for i, v in enumerate(vals):
            ax.text(i, v, f"{v:.0f}", ha="center", va="bottom")
        ax.set(title=f"largest {'model' if key == 'params' else 'sequence'} in {budget:.0f} GiB", ylabel=label)
    ax = axes[2]
    names = [f"{r['system']}\n{r['search']}" for r in rows]
    ax.bar(names, [r["predicted_bytes"] / 2**30 for r in rows], width=0.4, label="predicted", align="edge")
    if all("max_rss_bytes" in r for r in rows):
        ax.bar(names, [r["max_rss_bytes"] / 2**30 for r in rows], width=-0.4, label="peak RSS", align="edge")
    ax.axhline(budget, color="red", linestyle="--", label="budget")
    ax.set(title="confirmation runs (3 steps)", ylabel="GiB")
    ax.tick_params(axis="x", labelsize=7)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
