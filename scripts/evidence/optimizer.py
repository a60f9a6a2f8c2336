#!/usr/bin/python3
"""Evidence for 8-bit AdamW states (`--optim-state q8`), rerunnable by anyone: trains one model on the Austen corpus
with fp32 and with 8-bit moments, alone and under full AGoQ (agoq activations + q8 gradient store, on one rank and on
two ranks with the q8 all-reduce), all on the same tokens and seed; measures the states' error against fp32 per block
size and mapping (`agoq bench optim-error`) and the step time (`agoq bench optim`); writes a markdown report with
plots (loss curves; state error).

    /usr/bin/python3 scripts/evidence/optimizer.py [--steps 2000] [--out docs/evidence]

Every run draws 2 micro-batches of --batch sequences per step from one global stream (1 rank x --accum 2, or
2 ranks x 1), so all configurations see the same tokens. Needs a built agoq (scripts/build.sh), the prepared corpus
(data/austen), mpirun and python3-matplotlib. Training runs use one thread each under `nice -n 10`, all at once.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# name -> (ranks, extra flags). fp32 is the baseline the others are held to.
CONFIGS = {
    "fp32 (baseline)": (1, ["--baseline"]),
    "q8 Adam": (1, ["--act-policy", "fp32", "--grad-store", "fp32", "--allreduce", "mpi", "--optim-state", "q8"]),
    "AGoQ + q8 Adam": (1, ["--act-policy", "agoq", "--grad-store", "q8", "--optim-state", "q8"]),
    "AGoQ + q8 Adam, 2 ranks": (2, ["--act-policy", "agoq", "--grad-store", "q8", "--allreduce", "q8",
                                    "--optim-state", "q8"]),
}


def run(cmd, env=None):
    print("+", " ".join(cmd), flush=True)
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if res.returncode != 0:
        sys.exit(f"evidence: command failed ({res.returncode}): {' '.join(cmd)}\n{res.stderr[-3000:]}")
    return res


def slug(name):
    return "".join(c if c.isalnum() else "_" for c in name).strip("_")


def train_cmd(args, name):
    ranks, flags = CONFIGS[name]
    out = os.path.join(args.runs, slug(name))
    cmd = [args.bin, "train", "--data", args.data, "--out", out, "--overwrite", "--steps", str(args.steps),
           "--seed", "1", "--dim", str(args.dim), "--layers", str(args.layers), "--heads", "4", "--ffn",
           str(args.ffn), "--seq", str(args.seq), "--batch", str(args.batch), "--accum", str(2 // ranks),
           "--warmup", "100", "--eval-every", str(args.eval_every), "--eval-batches", "32", "--log-every", "200"]
    cmd += flags
    if ranks > 1:
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-x", "OMP_NUM_THREADS=1",
               "-x", "OPENBLAS_NUM_THREADS=1", "-np", str(ranks)] + cmd
    return ["nice", "-n", "10"] + cmd, out


def train_all(args):
    """All runs at once, one thread each (the same CPU time as one after another, and no idle core)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    procs = []
    for name in CONFIGS:
        cmd, out = train_cmd(args, name)
        os.makedirs(out, exist_ok=True)
        print("+", " ".join(cmd), flush=True)
        log = open(os.path.join(args.runs, slug(name) + ".log"), "w")
        procs.append((name, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env), time.time()))
    seconds = {}
    for name, p, t0 in procs:
        if p.wait() != 0:
            sys.exit(f"evidence: training '{name}' failed; see {args.runs}/{slug(name)}.log")
        seconds[name] = time.time() - t0
    return seconds


def read_runs(args):
    return {name: [json.loads(line) for line in open(os.path.join(args.runs, slug(name), "metrics.jsonl"))]
            for name in CONFIGS}


def smooth(values, k=50):
    out, acc = [], []
    for v in values:
        acc.append(v)
        if len(acc) > k:
            acc.pop(0)
        out.append(sum(acc) / len(acc))
    return out


def memory_table(args):
    """The end-of-run memory table of each training log (peak by category, this run vs the fp32 baseline)."""
    out = {}
    for name in CONFIGS:
        text = open(os.path.join(args.runs, slug(name) + ".log")).read()
        at = text.find("peak memory by category")
        out[name] = text[at:].split("\n")[:9] if at >= 0 else []
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default="build/agoq")
    p.add_argument("--data", default="data/austen")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--ffn", type=int, default=344)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--error-steps", type=int, default=300)
    p.add_argument("--runs", default="runs/evidence_optimizer")
    p.add_argument("--out", default="docs/evidence")
    p.add_argument("--reuse-runs", action="store_true", help="read the training runs of an earlier call")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.runs, exist_ok=True)

    seconds = {} if args.reuse_runs else train_all(args)
    runs = read_runs(args)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    errors = json.loads(run(["nice", "-n", "10", args.bin, "bench", "optim-error", "--json", "--data", args.data,
                             "--steps", str(args.error_steps)], env).stdout)
    speed = json.loads(run(["nice", "-n", "10", args.bin, "bench", "optim", "--json", "--threads", "1"], env).stdout)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE, text=True).stdout.strip()

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, rows in runs.items():
        ax1.plot([r["step"] for r in rows], smooth([r["loss"] for r in rows]), label=name)
        ev = [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]
        ax2.plot([s for s, _ in ev], [v for _, v in ev], marker=".", label=name)
    ax1.set(title="train loss (50-step mean)", xlabel="step", ylabel="loss")
    ax2.set(title="validation loss", xlabel="step", ylabel="loss")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "optim_loss.png"), dpi=110)

    last = [e for e in errors if e["step"] == args.error_steps]
    fig, ax = plt.subplots(figsize=(11, 5))
    xs = range(len(last))
    ax.bar([x - 0.27 for x in xs], [e["m_rel_err"] for e in last], width=0.27, label="m")
    ax.bar(list(xs), [e["v_rel_err"] for e in last], width=0.27, label="v")
    ax.bar([x + 0.27 for x in xs], [min(e["update_rel_err"], 1.0) for e in last], width=0.27,
           label="update (clipped at 1)")
    ax.set_xticks(list(xs), [e["variant"].replace(", ", "\n") for e in last], fontsize=6)
    ax.set(title=f"relative error vs fp32 states after {args.error_steps} steps", ylabel="relative L2 error")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "optim_state_error.png"), dpi=110)

    final = {name: [r["val_loss"] for r in rows if "val_loss" in r][-1] for name, rows in runs.items()}
    base = final["fp32 (baseline)"]
    tokens = args.steps * 2 * args.batch * args.seq
    lines = [
        "# 8-bit AdamW states: convergence, state error, speed",
        "",
        f"Generated by `scripts/evidence/optimizer.py --steps {args.steps}` on {time.strftime('%Y-%m-%d')} at commit "
        f"{commit}" + (" (training runs reused from an earlier call)." if args.reuse_runs else "."),
        f"Training: dim {args.dim}, {args.layers} layers, 4 heads, ffn {args.ffn}, seq {args.seq}, 2 micro-batches of "
        f"{args.batch} per step, {args.steps} steps = {tokens:,} tokens seen (the corpus' 1.03M training tokens about "
        f"{tokens / 1.0255e6:.1f} times), seed 1, the same tokens for every configuration; validation on 32 fixed "
        "batches. Not the demo model (dim 256, 6 layers, seq 256): one of its steps took 3 s on one thread of this "
        "shared machine, so 2,000 steps x 5 processes would take over 8 hours; this smaller model keeps the runs "
        "near half an hour (all five processes at once on two shared cores, so train times are wall times under "
        "that load).",
        "",
        "![loss curves](optim_loss.png)",
        "",
        "| configuration | final val loss | vs fp32 | largest gradient norm | train time (s) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, rows in runs.items():
        gap = 100.0 * (final[name] - base) / base
        lines.append(f"| {name} | {final[name]:.4f} | {gap:+.2f}% | {max(r['grad_norm'] for r in rows):.3g} | "
                     f"{format(seconds[name], '.0f') if name in seconds else '-'} |")
    worst = max(abs(100.0 * (final[n] - base) / base) for n in CONFIGS if n != "fp32 (baseline)")
    lines += ["", f"Target: every 8-bit-state configuration within 1% of the fp32 baseline's final validation loss: "
              f"worst **{worst:.2f}%** ({'met' if worst <= 1 else 'NOT met'}).", "",
              "Peak memory of each run (`agoq train`'s end-of-run table; first column: the run, second: the fp32 "
              "baseline from the memory model):", ""]
    for name, table in memory_table(args).items():
        lines += [f"{name}:", "```"] + table + ["```"]
    lines += ["", f"## State error (`agoq bench optim-error --steps {args.error_steps}`)", "",
              "A dim-128, 2-layer model trains with fp32 AdamW on the corpus; every 8-bit variant is fed the same "
              "clipped gradients and its decoded m and v are compared with the fp32 ones, and its weight update "
              "(from the same weights) with the fp32 update. `v->0`: values whose v decodes to 0 while the fp32 v "
              "is not; their next update divides by little more than eps.", "",
              "![state error](optim_state_error.png)", "",
              "| variant | step | m error | v error | update error | v->0 | bytes / value |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for e in errors:
        lines.append(f"| {e['variant']} | {e['step']} | {e['m_rel_err']:.4f} | {e['v_rel_err']:.4f} | "
                     f"{e['update_rel_err']:.4f} | {100 * e['v_zero_share']:.4f}% | {e['state_bytes_per_value']:.4f} |")
    by = {r["state"]: r for r in speed}
    lines += ["", "## Step time (`agoq bench optim --threads 1`)", "",
              "| moments | step ms | vs fp32 | state MiB | GB/s |", "| --- | --- | --- | --- | --- |"]
    for r in speed:
        lines.append(f"| {r['state']} | {1e3 * r['seconds']:.1f} | {r['ratio_vs_fp32']:.3f}x | "
                     f"{r['state_bytes'] / 2**20:.1f} | {r['gb_per_s']:.1f} |")
    lines += ["", f"Target: q8 step <= 1.1x the fp32 step: **{by['q8']['ratio_vs_fp32']:.3f}x** (both in one run, "
              f"taking turns step by step, {by['q8']['params'] / 1e6:.1f}M parameters).", ""]
    with open(os.path.join(args.out, "optimizer.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
