#!/usr/bin/python3
"""Evidence for training speed on the CPU, rerunnable by anyone: `agoq train` against transformers'
LlamaForCausalLM training step on PyTorch (eager, fp32, the same threads) on one SmolLM-135M-shaped model (dim 576,
30 layers, 9/3 heads, ffn 1536, vocab 49152, tied; random weights written by transformers as a Hugging Face
folder, both sides load it), micro-batch 1 at seq 512 and 2048, every run repeated and interleaved with the
others. agoq runs unquantized (`--baseline`) and with
AGoQ's defaults, both with `--profile` for the split of the step (GEMMs, attention, LM head + loss, activation store,
other ops, the rest). MFU counts 6 x parameters + 6 x layers x seq x dim FLOPs per token against the machine's
sgemm peak (`agoq bench train`). Writes docs/evidence/speed.md, speed.json and speed_split.png.

    .venv/bin/python scripts/evidence_speed.py [--steps 6] [--out docs/evidence] [--work /tmp/agoq_speed]

Run it on a quiet machine. Needs a built agoq, the prepared corpus (data/austen) and the test venv
(scripts/install-deps.sh --test). About 30 minutes on 2 cores (PyTorch at seq 2048 is most of it).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from evidence_finetune import SMOLLM_135M, corpus_text, log, make_model  # noqa: E402

AGOQ_RUNS = {"agoq fp32": ["--baseline"], "AGoQ": []}
CLASSES = ("gemm", "attention", "head", "act_store", "other", "rest")
LABELS = {"gemm": "GEMMs", "attention": "attention", "head": "LM head + loss", "act_store": "activation store",
          "other": "other ops", "rest": "rest (optimizer, grad store, data)"}


def agoq_run(args, seq, name, flags, model, data, threads, rep):
    """One run's timed steps (after the first two): tokens/s and op seconds of each."""
    out = os.path.join(args.work, "runs", f"{name.replace(' ', '_')}_{seq}_{rep}")
    cmd = [args.bin, "train", "--data", data, "--init-from", model, "--out", out, "--overwrite", "--seq", str(seq),
           "--batch", "1", "--steps", str(args.steps + 2), "--warmup", "1", "--lr", "1e-5", "--min-lr", "1e-6",
           "--eval-every", "0",
           "--eval-batches", "1", "--log-every", "1", "--quiet", "--profile", *flags]
    log("+", *cmd)
    subprocess.run(cmd, check=True, env=dict(os.environ, OMP_NUM_THREADS=str(threads),
                                                OPENBLAS_NUM_THREADS=str(threads)))
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()][2:]


def runs_interleaved(args, seq, model, data, threads):
    """Each agoq configuration and PyTorch args.reps times, interleaved (so a slow spell of the machine hits all
    three): tokens/s as the median over every timed step, each repetition's median beside it, and agoq's mean op
    seconds per step."""
    steps = {name: [] for name in AGOQ_RUNS}
    per_rep = {name: [] for name in [*AGOQ_RUNS, "PyTorch"]}
    for rep in range(args.reps):
        for name, flags in AGOQ_RUNS.items():
            recs = agoq_run(args, seq, name, flags, model, data, threads, rep)
            steps[name] += recs
            per_rep[name].append(statistics.median(r["tokens_per_s"] for r in recs))
        per_rep["PyTorch"].append(torch_run(args, seq, model, threads)["tokens_per_s"])
    out = {name: {"tokens_per_s": statistics.median(r["tokens_per_s"] for r in recs), "runs_tokens_per_s": per_rep[name],
                  "op_seconds": {c: statistics.mean(r["op_seconds"][c] for r in recs) for c in CLASSES}}
           for name, recs in steps.items()}
    out["PyTorch"] = {"tokens_per_s": statistics.median(per_rep["PyTorch"]), "runs_tokens_per_s": per_rep["PyTorch"]}
    # Ratios within each repetition's neighbouring runs: a slow spell of the machine moves both sides.
    out["AGoQ"]["pair_step_ratios"] = [f / q for f, q in zip(per_rep["agoq fp32"], per_rep["AGoQ"])]
    out["agoq fp32"]["pair_vs_torch"] = [a / t for a, t in zip(per_rep["agoq fp32"], per_rep["PyTorch"])]
    return out


def torch_run(args, seq, model_dir, threads):
    """transformers' LlamaForCausalLM, fp32, AdamW: forward with labels, backward, step (median of the timed steps)."""
    import torch
    from transformers import LlamaForCausalLM
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    x = torch.randint(0, 8192, (1, seq))
    times = []
    for i in range(args.steps + 2):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        model(input_ids=x, labels=x).loss.backward()
        opt.step()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    del model, opt
    return {"tokens_per_s": seq / statistics.median(times)}


def sgemm_peak(args):
    out = subprocess.run([args.bin, "bench", "train", "--json", "--skip-memory", "--steps", "1"], check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out)["sgemm_gflops"]


def gemm_flops_per_token():
    """(decoder layers' GEMMs, the LM head's GEMMs) FLOPs per token of a training step."""
    c = SMOLLM_135M
    d, f, L, v = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    kv = c["num_key_value_heads"] * c["head_dim"]
    return 6.0 * L * (2 * d * d + 2 * d * kv + 3 * d * f), 6.0 * v * d


def flops_per_token(seq):
    c = SMOLLM_135M
    d, L = c["hidden_size"], c["num_hidden_layers"]
    layers, head = gemm_flops_per_token()
    norms = 6.0 * (L * 2 * d + d)  # tied: the embedding is the lm_head
    return layers + head + norms + 6.0 * L * seq * d


def pair_ratio(r, name, key, whole):
    """The median of the repetitions' ratios r[name][key] (older reports: `whole`, the ratio of the medians)."""
    pairs = r[name].get(key)
    if pairs:
        return statistics.median(pairs), pairs
    return whole, []


def ratio_cell(ratio, pairs, fmt):
    return format(ratio, fmt) + (" (" + ", ".join(format(x, fmt) for x in pairs) + ")" if pairs else "")


def plot_split(path, results):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4))
    names = [(int(seq), name) for seq in results for name in AGOQ_RUNS]
    bottom = [0.0] * len(names)
    for c in CLASSES:
        vals = [results[str(seq)][name]["op_seconds"][c] * 1e3 / seq for seq, name in names]
        ax.bar([f"{name}\nseq {seq}" for seq, name in names], vals, bottom=bottom, label=LABELS[c])
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("ms per token")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def report(args, results, peak, threads):
    lines = ["# Training speed on the CPU: agoq against transformers on PyTorch", "",
             "Made by `scripts/evidence_speed.py` on this machine (2 cores, AVX2+FMA, no GPU), nothing else running. "
             "One SmolLM-135M-shaped model (dim 576, 30 layers, 9/3 heads, ffn 1536, vocabulary 49152 tied; random "
             "weights written by transformers) loaded by both; micro-batch 1, AdamW, "
             f"{threads} threads each; tokens/s is the median step after two warm-up steps ({args.steps} timed steps; "
             f"agoq's two configurations and PyTorch {args.reps} runs each, interleaved, every run's median in "
             "brackets: the spread is this machine's run-to-run noise). PyTorch is "
             "transformers' `LlamaForCausalLM` (eager attention, fp32) on PyTorch 1.13; agoq is `agoq train "
             f"--init-from` with `--profile`. MFU: model FLOPs (6 x parameters + 6 x layers x seq x dim per token) "
             f"per second against the sgemm peak measured in the same run, {peak:.0f} GFLOP/s.", "",
             "| seq | PyTorch tok/s | agoq fp32 tok/s | AGoQ tok/s | agoq fp32 / PyTorch (each repetition) | agoq fp32 "
             "MFU | AGoQ step / agoq fp32 step (each repetition) |", "|---|---|---|---|---|---|---|"]
    for seq in map(int, results):
        r = results[str(seq)]
        t, a, q = r["PyTorch"]["tokens_per_s"], r["agoq fp32"]["tokens_per_s"], r["AGoQ"]["tokens_per_s"]
        mfu = a * flops_per_token(seq) / (peak * 1e9)
        spread = lambda n: ("(" + ", ".join(f"{x:.0f}" for x in r[n]["runs_tokens_per_s"]) + ")"
                            if r[n].get("runs_tokens_per_s") else "")
        vs_torch = ratio_cell(*pair_ratio(r, "agoq fp32", "pair_vs_torch", a / t), ".2f")
        cost = ratio_cell(*pair_ratio(r, "AGoQ", "pair_step_ratios", a / q), ".3f")
        lines.append(f"| {seq} | {t:.0f} {spread('PyTorch')} | {a:.0f} {spread('agoq fp32')} | {q:.0f} {spread('AGoQ')} "
                     f"| {vs_torch} | {mfu * 100:.0f}% | {cost} |")
    lines += ["", "Goals: agoq at least 2x PyTorch, at least 90% MFU, AGoQ's step at most 1.03x agoq's fp32 step. "
              "Both ratios are read within each repetition (the fp32 run, the AGoQ run and the PyTorch run made one "
              "after the other), their median first.", "",
              "What bounds the MFU: the GEMMs' own rate (agoq fp32; FLOPs of the class over its `--profile` seconds). "
              "Were attention as fast per FLOP as the GEMMs and every other op free, the MFU would be the GEMMs' "
              "rate together (the last column): the GEMMs at these shapes, not the rest of the step, keep it under "
              "the goal.", "",
              "| seq | decoder GEMMs GFLOP/s | of the sgemm peak | LM head + loss GFLOP/s | of the peak | all GEMMs, "
              "of the peak |", "|---|---|---|---|---|---|"]
    layers, head = gemm_flops_per_token()
    for seq in map(int, results):
        s = results[str(seq)]["agoq fp32"]["op_seconds"]
        g, h = layers * seq / s["gemm"] / 1e9, head * seq / s["head"] / 1e9
        bound = (layers + head) * seq / (s["gemm"] + s["head"]) / 1e9
        lines.append(f"| {seq} | {g:.0f} | {100 * g / peak:.0f}% | {h:.0f} | {100 * h / peak:.0f}% | "
                     f"{100 * bound / peak:.0f}% |")
    lines += ["",
              "Where a step goes (`--profile`; share of the step's wall time):", "",
              "| run | " + " | ".join(LABELS[c] for c in CLASSES) + " |", "|---|" + "---|" * len(CLASSES)]
    for seq in map(int, results):
        for name in AGOQ_RUNS:
            s = results[str(seq)][name]["op_seconds"]
            total = sum(s.values())
            lines.append(f"| {name}, seq {seq} | " + " | ".join(f"{100 * s[c] / total:.1f}%" for c in CLASSES) +
                         " |")
    lines += ["", "![time per token by op class](speed_split.png)"]
    plot_split(os.path.join(args.out, "speed_split.png"), results)
    path = os.path.join(args.out, "speed.md")
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(path + ".tmp", path)
    with open(os.path.join(args.out, "speed.json"), "w") as f:
        json.dump({"sgemm_gflops": peak, "threads": threads, "args": {"steps": args.steps, "reps": args.reps},
                   "results": results}, f, indent=1)
    log("wrote", path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/agoq")
    ap.add_argument("--steps", type=int, default=4, help="timed steps per run (after two warm-up steps)")
    ap.add_argument("--reps", type=int, default=2, help="runs of each agoq configuration, interleaved")
    ap.add_argument("--out", default="docs/evidence")
    ap.add_argument("--work", default="/tmp/agoq_speed")
    ap.add_argument("--corpus", default="data/austen", help="a prepared set whose text is the corpus")
    ap.add_argument("--seqs", default="512,2048", help="sequence lengths, comma-separated")
    ap.add_argument("--report-only", action="store_true", help="rewrite the report from --out/speed.json")
    args = ap.parse_args()
    if args.report_only:
        saved = json.load(open(os.path.join(args.out, "speed.json")))
        vars(args).update(saved["args"])  # the report describes the runs it was made from
        return report(args, saved["results"], saved["sgemm_gflops"], saved["threads"])
    threads = os.cpu_count()
    os.makedirs(args.work, exist_ok=True)
    model, data = os.path.join(args.work, "model"), os.path.join(args.work, "data")
    text = corpus_text(args.corpus)
    make_model(model, text, SMOLLM_135M, shard_size="5GB")
    if not os.path.exists(os.path.join(data, "meta.json")):
        text_file = os.path.join(args.work, "corpus.txt")
        with open(text_file, "w") as f:
            f.write(text)
        subprocess.run([args.bin, "prepare", "--input", text_file, "--tokenizer", model, "--out", data], check=True)
    peak = sgemm_peak(args)
    results = {}
    for seq in map(int, args.seqs.split(",")):
        r = runs_interleaved(args, seq, model, data, threads)
        log(f"seq {seq}: " + ", ".join(f"{k} {v['tokens_per_s']:.0f} tok/s" for k, v in r.items()))
        results[str(seq)] = r
    report(args, results, peak, threads)


if __name__ == "__main__":
    main()
