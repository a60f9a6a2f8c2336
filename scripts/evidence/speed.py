#!/usr/bin/python3
"""Evidence for training speed on the CPU, rerunnable by anyone: `agoq train` against transformers'
LlamaForCausalLM on PyTorch 2 (the latest PyPI wheel, in a venv this script makes) in its fastest configuration
here (SDPA attention; fp32, and bf16 autocast where the CPU has BF16; the faster of the fused and the foreach
AdamW, measured), on one SmolLM-135M-shaped model (dim 576, 30 layers, 9/3 heads, ffn 1536, vocab 49152, tied;
random weights written by transformers as a Hugging Face folder, both sides load it), micro-batch 1 at seq 512 and
2048, every run repeated and interleaved with the others; then agoq alone on the Llama-3.2-1B shape at seq 2048.

agoq runs `--baseline --compute fp32` (the exact reference), `--baseline` (unquantized, bf16 GEMMs) and AGoQ's
defaults (bf16 GEMMs), each with `--profile` for the split of the step. On a CPU without BF16 the bf16 runs are
left out and the report says it compares fp32 with fp32. MFU counts 6 x parameters + 6 x layers x seq x dim FLOPs
per token against the matmul peak of the precision in use, measured in the same run (`agoq bench train`).
Writes docs/evidence/speed.md, speed.json and speed_split.png.

    /usr/bin/python3 scripts/evidence/speed.py [--steps 4] [--reps 3] [--out docs/evidence] [--work /tmp/agoq_speed]

Run it on a quiet machine. Needs a built agoq, the prepared corpus (data/austen), the test venv's transformers
(scripts/install-deps.sh --test; run with .venv/bin/python) for writing the models, and network access to PyPI
the first time (PyTorch 2 and transformers into --torch-venv, about 6 GB). About an hour on 2 cores.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from finetune import SHAPE as LLAMA_1B, SMOLLM_135M, agoq_env, corpus_text, log, make_model  # noqa: E402

CLASSES = ("gemm", "attention", "head", "act_store", "other", "rest")
LABELS = {"gemm": "GEMMs", "attention": "attention", "head": "LM head + loss", "act_store": "activation store",
          "other": "other ops", "rest": "rest (optimizer, grad store, data)"}


def agoq_runs(bf16):
    """The agoq configurations: name -> flags."""
    runs = {"agoq fp32": ["--baseline", "--compute", "fp32"]}
    if bf16:
        runs["agoq bf16"] = ["--baseline", "--compute", "bf16"]
    runs["AGoQ"] = ["--compute", "bf16" if bf16 else "fp32"]
    return runs


def torch_runs(bf16):
    return ["PyTorch fp32"] + (["PyTorch bf16"] if bf16 else [])


def agoq_run(args, seq, name, flags, model, data, threads, tag, steps):
    """One run's timed steps (after the first two): its metrics records; the run's folder is removed."""
    out = os.path.join(args.work, "runs", f"{name.replace(' ', '_')}_{seq}_{tag}")
    cmd = [args.bin, "train", "--data", data, "--init-from", model, "--out", out, "--overwrite", "--seq", str(seq),
           "--batch", "1", "--steps", str(steps + 2), "--warmup", "1", "--lr", "1e-5", "--min-lr", "1e-6",
           "--eval-every", "0", "--eval-batches", "1", "--log-every", "1", "--quiet", "--profile", *flags]
    log("+", *cmd)
    subprocess.run(cmd, check=True, env=agoq_env(threads))
    with open(os.path.join(out, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()][2:]
    shutil.rmtree(out)  # its checkpoint (1.6 GB at the SmolLM shape, 14 GB at 1B) is not needed
    return records


def torch_run(args, seq, model, threads, name):
    """PyTorch 2 in its venv (this script's --torch-worker): the run's tokens/s and what it ran."""
    cmd = [torch_python(args), os.path.abspath(__file__), "--torch-worker", "--model", model, "--seq", str(seq),
           "--steps", str(args.steps), "--threads", str(threads), "--dtype", name.split()[-1]]
    log("+", *cmd)
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def runs_interleaved(args, seq, model, data, threads, bf16):
    """Every configuration args.reps times, interleaved (a slow spell of the machine hits them all): tokens/s as the
    median of the repetitions' medians, each repetition's beside it, and agoq's mean op seconds per step."""
    names = [*agoq_runs(bf16), *torch_runs(bf16)]
    per_rep = {n: [] for n in names}
    steps = {n: [] for n in agoq_runs(bf16)}
    torch_info = {}
    for rep in range(args.reps):
        for name, flags in agoq_runs(bf16).items():
            recs = agoq_run(args, seq, name, flags, model, data, threads, rep, args.steps)
            steps[name] += recs
            per_rep[name].append(statistics.median(r["tokens_per_s"] for r in recs))
        for name in torch_runs(bf16):
            r = torch_run(args, seq, model, threads, name)
            per_rep[name].append(r["tokens_per_s"])
            torch_info = {k: v for k, v in r.items() if k != "tokens_per_s"}
    out = {n: {"tokens_per_s": statistics.median(v), "runs_tokens_per_s": v} for n, v in per_rep.items()}
    for name, recs in steps.items():
        out[name]["op_seconds"] = {c: statistics.mean(r["op_seconds"][c] for r in recs) for c in CLASSES}
    # Ratios within each repetition's neighbouring runs: a slow spell of the machine moves both sides.
    fastest = [max(per_rep[n][i] for n in torch_runs(bf16)) for i in range(args.reps)]
    ref = "agoq bf16" if bf16 else "agoq fp32"
    out["AGoQ"]["pair_vs_fastest_torch"] = [a / t for a, t in zip(per_rep["AGoQ"], fastest)]
    out["AGoQ"]["pair_step_ratios"] = [u / q for u, q in zip(per_rep[ref], per_rep["AGoQ"])]
    out["torch"] = torch_info
    return out


def torch_python(args):
    """The venv with the latest PyTorch and transformers from PyPI, made on first use."""
    py = os.path.join(args.torch_venv, "bin", "python")
    if not os.path.exists(py):
        log("making", args.torch_venv, "(PyTorch 2 and transformers from PyPI)")
        subprocess.run([sys.executable, "-m", "venv", args.torch_venv], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "torch", "transformers"],
                       check=True)
    return py


def torch_worker(args):
    """Runs in the PyTorch 2 venv: LlamaForCausalLM with SDPA, forward with labels (under bf16 autocast when
    --dtype bf16), backward, AdamW step; prints one JSON line with the median tokens/s of the timed steps."""
    import torch
    import transformers
    from transformers import LlamaForCausalLM
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = LlamaForCausalLM.from_pretrained(args.model, dtype=torch.float32, attn_implementation="sdpa")
    model.train()
    x = torch.randint(0, 8192, (1, args.seq))
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.dtype == "bf16")

    def step(opt):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with autocast:
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        t1 = time.perf_counter()
        opt.step()
        return time.perf_counter() - t0, time.perf_counter() - t1

    # The faster AdamW here: each kind's optimizer step timed on this model (after one warm-up step).
    adamw = {}
    for kind in ("fused", "foreach"):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, **{kind: True})
        step(opt)
        adamw[kind] = step(opt)[1]
    kind = min(adamw, key=adamw.get)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, **{kind: True})
    times = [step(opt)[0] for _ in range(args.steps + 2)][2:]
    print(json.dumps({"tokens_per_s": args.seq / statistics.median(times), "torch": torch.__version__,
                      "transformers": transformers.__version__, "adamw": kind,
                      "adamw_step_s": adamw}))


def bench_peaks(args):
    """(sgemm GFLOP/s, bf16 matmul GFLOP/s or 0), measured by agoq bench train."""
    out = subprocess.run([args.bin, "bench", "train", "--json", "--skip-memory", "--steps", "1"], check=True,
                         stdout=subprocess.PIPE, text=True, env=agoq_env(os.cpu_count())).stdout
    j = json.loads(out)
    return j["sgemm_gflops"], j.get("bf16_matmul_gflops", 0.0)


def flops_per_token(shape, seq):
    """Model FLOPs per token of a training step: 6 x the GEMMs' parameters (the LM head counted once, tied or
    not), the norms, and 6 x layers x seq x dim for attention's products (causal: half of 12)."""
    d, f, L, v = shape["hidden_size"], shape["intermediate_size"], shape["num_hidden_layers"], shape["vocab_size"]
    kv = shape["num_key_value_heads"] * shape["head_dim"]
    q = shape["num_attention_heads"] * shape["head_dim"]
    layers = 6.0 * L * (2 * d * q + 2 * d * kv + 3 * d * f)
    return layers + 6.0 * v * d + 6.0 * (L * 2 * d + d) + 6.0 * L * seq * d


def prepared(args, name, shape, text):
    """The model folder and the corpus tokenized by its tokenizer, made once."""
    model, data = os.path.join(args.work, name), os.path.join(args.work, name + "_data")
    make_model(model, text, shape, shard_size="5GB")
    if not os.path.exists(os.path.join(data, "meta.json")):
        text_file = os.path.join(args.work, "corpus.txt")
        with open(text_file, "w") as f:
            f.write(text)
        subprocess.run([args.bin, "prepare", "--input", text_file, "--tokenizer", model, "--out", data], check=True)
    return model, data


def cell(values, fmt):
    return " (" + ", ".join(format(x, fmt) for x in values) + ")" if values else ""


def plot_split(path, results, bf16):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 4))
    names = [(int(seq), name) for seq in results for name in agoq_runs(bf16)]
    bottom = [0.0] * len(names)
    for c in CLASSES:
        vals = [results[str(seq)][name]["op_seconds"][c] * 1e3 / seq for seq, name in names]
        ax.bar([f"{name}\nseq {seq}" for seq, name in names], vals, bottom=bottom, label=LABELS[c])
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("ms per token")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def report(args, saved):
    results, bf16, cpu = saved["results"], saved["bf16"], saved["cpu"]
    peak = saved["bf16_gflops"] if bf16 else saved["sgemm_gflops"]
    torch = next(iter(results.values()))["torch"]
    names = [*torch_runs(bf16), *agoq_runs(bf16)]
    lines = ["# Training speed on the CPU: agoq against PyTorch 2", "",
             f"Made by `scripts/evidence/speed.py` on this machine ({cpu}; 2 cores, no GPU), nothing else running. "
             "One SmolLM-135M-shaped model (dim 576, 30 layers, 9/3 heads, ffn 1536, vocabulary 49152 tied; random "
             "weights written by transformers) loaded by both; micro-batch 1, AdamW, "
             f"{saved['threads']} threads each; tokens/s is the median step after two warm-up steps ({args.steps} "
             f"timed steps a run; every configuration {args.reps} runs, interleaved, each run's median in brackets: "
             f"the spread is the machine's run-to-run noise). PyTorch is {torch.get('torch')} from PyPI with "
             f"transformers {torch.get('transformers')}: `LlamaForCausalLM` with SDPA attention, "
             + ("fp32 or under bf16 autocast" if bf16 else "fp32 (no bf16 autocast: this CPU has no BF16)")
             + f", and the faster AdamW of the two measured here ({torch.get('adamw')}). agoq is `agoq train "
             "--init-from` with `--profile`" +
             ". MFU: model FLOPs (6 x parameters + 6 x layers x seq x dim per token) "
             f"per second against the matmul peak of the precision in use measured in the same run: sgemm "
             f"{saved['sgemm_gflops']:.0f} GFLOP/s" + (f", bf16 {saved['bf16_gflops']:.0f} GFLOP/s." if bf16 else
                                                        "; this CPU has no BF16, so every run here is fp32."), "",
             "| seq | " + " | ".join(f"{n} tok/s" for n in names) + " | AGoQ / fastest PyTorch | AGoQ MFU | AGoQ "
             "step / unquantized step |", "|---|" + "---|" * (len(names) + 3)]
    for seq, r in results.items():
        a = r["AGoQ"]
        mfu = a["tokens_per_s"] * flops_per_token(SMOLLM_135M, int(seq)) / (peak * 1e9)
        vs = a["pair_vs_fastest_torch"]
        cost = a["pair_step_ratios"]
        lines.append(f"| {seq} | " + " | ".join(f"{r[n]['tokens_per_s']:.0f}{cell(r[n]['runs_tokens_per_s'], '.0f')}"
                                                for n in names) +
                     f" | {statistics.median(vs):.2f}{cell(vs, '.2f')} | {100 * mfu:.0f}% | "
                     f"{statistics.median(cost):.3f}{cell(cost, '.3f')} |")
    unq = "`--baseline` with bf16 GEMMs" if bf16 else "`--baseline`"
    lines += ["", "Goals (a CPU with BF16): AGoQ's default at least 1.5x PyTorch 2's fastest configuration at both "
              "lengths, at least 65% MFU at seq 2048, AGoQ's step at most 1.05x agoq's unquantized step "
              f"({unq}). Both ratios are read within each repetition (runs made one after the other), their "
              "median first.", ""]
    if "llama_1b" in saved:
        b = saved["llama_1b"]
        mfu = b["tokens_per_s"] * flops_per_token(LLAMA_1B, 2048) / (peak * 1e9)
        lines += [f"agoq alone on the Llama-3.2-1B shape (dim 2048, 16 layers, 32/8 heads, ffn 8192, vocabulary "
                  f"128256 tied), seq 2048, micro-batch 1, AGoQ + `{' '.join(b['flags'])}`: "
                  f"**{b['tokens_per_s']:.0f} tokens/s**{cell(b['runs_tokens_per_s'], '.0f')}, MFU "
                  f"{100 * mfu:.0f}%.", ""]
    lines += ["Where a step goes (`--profile`; share of the step's wall time):", "",
              "| run | " + " | ".join(LABELS[c] for c in CLASSES) + " |", "|---|" + "---|" * len(CLASSES)]
    for seq, r in results.items():
        for name in agoq_runs(bf16):
            s = r[name]["op_seconds"]
            total = sum(s.values())
            lines.append(f"| {name}, seq {seq} | " + " | ".join(f"{100 * s[c] / total:.1f}%" for c in CLASSES) + " |")
    lines += ["", "![time per token by op class](speed_split.png)"]
    plot_split(os.path.join(args.out, "speed_split.png"), results, bf16)
    path = os.path.join(args.out, "speed.md")
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(path + ".tmp", path)
    log("wrote", path)


def cpu_name():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            name = line.split(":", 1)[1].strip()
            flags = open("/proc/cpuinfo").read()
            isa = [f for f in ("amx_bf16", "avx512_bf16", "avx512f", "avx2") if f" {f}" in flags]
            return f"{name}, {' '.join(isa)}"
    return "unknown CPU"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/agoq")
    ap.add_argument("--steps", type=int, default=4, help="timed steps per run (after two warm-up steps)")
    ap.add_argument("--reps", type=int, default=3, help="runs of each configuration, interleaved")
    ap.add_argument("--out", default="docs/evidence")
    ap.add_argument("--work", default="/tmp/agoq_speed")
    ap.add_argument("--torch-venv", default=os.path.expanduser("~/.cache/agoq/torch2-venv"),
                    help="the venv of PyTorch 2 (made here on first use)")
    ap.add_argument("--corpus", default="data/austen", help="a prepared set whose text is the corpus")
    ap.add_argument("--seqs", default="512,2048", help="sequence lengths, comma-separated")
    ap.add_argument("--skip-1b", action="store_true", help="leave out the Llama-3.2-1B-shaped run")
    ap.add_argument("--reps-1b", type=int, default=1, help="runs of the Llama-3.2-1B-shaped configuration")
    ap.add_argument("--report-only", action="store_true", help="rewrite the report from --out/speed.json")
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--seq", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--dtype", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_worker:
        return torch_worker(args)
    if args.report_only:
        saved = json.load(open(os.path.join(args.out, "speed.json")))
        vars(args).update(saved["args"])  # the report describes the runs it was made from
        return report(args, saved)
    threads = os.cpu_count()
    os.makedirs(args.work, exist_ok=True)
    torch_python(args)
    text = corpus_text(args.corpus)
    sgemm, bf16_peak = bench_peaks(args)
    bf16 = bf16_peak > 0
    saved = {"cpu": cpu_name(), "threads": threads, "sgemm_gflops": sgemm, "bf16_gflops": bf16_peak, "bf16": bf16,
             "args": {"steps": args.steps, "reps": args.reps}, "results": {}}
    model, data = prepared(args, "smollm", SMOLLM_135M, text)
    for seq in map(int, args.seqs.split(",")):
        r = runs_interleaved(args, seq, model, data, threads, bf16)
        log(f"seq {seq}: " + ", ".join(f"{k} {v['tokens_per_s']:.0f} tok/s" for k, v in r.items() if k != "torch"))
        saved["results"][str(seq)] = r
    if not args.skip_1b:
        model, data = prepared(args, "llama_1b", LLAMA_1B, text)
        flags = ["--optim-state", "q8", "--lm-head-grad", "pieces", "--compute", "bf16" if bf16 else "fp32"]
        runs = [statistics.median(r["tokens_per_s"] for r in
                                  agoq_run(args, 2048, "AGoQ 1B", flags, model, data, threads, rep, 2))
                for rep in range(args.reps_1b)]
        saved["llama_1b"] = {"flags": flags, "tokens_per_s": statistics.median(runs), "runs_tokens_per_s": runs}
    with open(os.path.join(args.out, "speed.json"), "w") as f:
        json.dump(saved, f, indent=1)
    report(args, saved)


if __name__ == "__main__":
    main()
