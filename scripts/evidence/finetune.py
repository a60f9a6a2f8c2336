#!/usr/bin/python3
"""Evidence for fine-tuning a 1B model in the memory of one machine (`agoq train --init-from`), rerunnable by anyone:
writes a Llama-3.2-1B-shaped model with random weights as Hugging Face bf16 shards (dim 2048, 16 layers, 32/8 heads,
ffn 8192, vocab 128256, tied, llama3 rope scaling) with a byte-level BPE tokenizer trained on the corpus (its
vocabulary is smaller than the model's: the rows past it are padding, as in many released models), prepares the
corpus with that tokenizer, and fine-tunes it at seq 2048, micro-batch 1, for a few steps twice:
AGoQ + 8-bit AdamW states + the lm_head gradient in pieces + bf16 GEMMs that round each weight as they read it instead
of keeping bf16 copies (`--optim-state q8 --lm-head-grad pieces --bf16-weights per-gemm`; the GEMMs' precision is
`--compute auto`: bf16 where the CPU has it) and the unquantized `--baseline`. For each it records the peak RSS
(getrusage of the child) and the tracker's peak per category (the last record of metrics.jsonl), or the run's
refusal line when the memory model says it cannot fit. Writes a markdown report.

    .venv/bin/python scripts/evidence/finetune.py [--steps 3] [--out docs/evidence] [--work /tmp/agoq_ft]

Needs a built agoq (scripts/build.sh), the prepared corpus (data/austen, as scripts/test.sh makes it) and the test venv
(scripts/install-deps.sh --test: transformers, tokenizers). About 25 GB of free disk under --work and 10 minutes
per fine-tune step on 2 cores.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

SHAPE = dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
             num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072, rms_norm_eps=1e-5,
             rope_theta=500000.0, tie_word_embeddings=True, head_dim=64,
             rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 8192})
# SmolLM-135M's shape (the speed and quality evidence: scripts/evidence/speed.py, scripts/evidence/quality.py).
SMOLLM_135M = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                   num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048, rms_norm_eps=1e-5,
                   rope_theta=10000.0, tie_word_embeddings=True, head_dim=64)
GIB = 1 << 30


def log(*a):
    print("evidence:", *a, flush=True)


def agoq_env(threads=None):
    """The environment of agoq's runs: OMP/OpenBLAS threads. (agoq sets OPENBLAS_CORETYPE itself where Debian's
    OpenBLAS takes the CPU for an older one: core/openblas_core.h.)"""
    threads = str(threads or os.cpu_count())
    return dict(os.environ, OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads)


def make_model(model_dir, corpus_text, shape=None, shard_size="1GB"):
    """The model folder (`shape`: LlamaConfig fields, Llama-3.2-1B's by default): config.json, bf16 weights
    (sharded with an index when larger than shard_size), tokenizer.json and tokenizer_config.json."""
    if any(os.path.exists(os.path.join(model_dir, f)) for f in ("model.safetensors.index.json", "model.safetensors")):
        log("model exists:", model_dir)
        return
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM
    os.makedirs(model_dir, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=8192, special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([corpus_text[i:i + 100000] for i in range(0, len(corpus_text), 100000)], trainer)
    tok.save(os.path.join(model_dir, "tokenizer.json"))
    with open(os.path.join(model_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
                   "eos_token": "<|end_of_text|>", "add_bos_token": True}, f)
    cfg = LlamaConfig(bos_token_id=tok.token_to_id("<|begin_of_text|>"),
                      eos_token_id=tok.token_to_id("<|end_of_text|>"), torch_dtype="bfloat16", **(shape or SHAPE))
    torch.manual_seed(0)
    t0 = time.time()
    with torch.no_grad():
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
        model.save_pretrained(model_dir, max_shard_size=shard_size, safe_serialization=True)
    log(f"wrote {model_dir}: {sum(p.numel() for p in model.parameters()) / 1e9:.3f} B parameters in "
        f"{time.time() - t0:.0f} s")


def run_measured(cmd, env):
    """Runs cmd; returns (status, stderr tail, peak RSS of the child in bytes)."""
    log("+", " ".join(cmd))
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.time()
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    log(f"exit {res.returncode} after {time.time() - t0:.0f} s, peak RSS {peak / GIB:.2f} GiB")
    if before * 1024 >= peak:  # ru_maxrss is the largest child so far: an earlier bigger one hides this one
        peak = None
    return res.returncode, (res.stdout + res.stderr)[-4000:], peak


def last_record(metrics):
    with open(metrics) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    return lines[-1] if lines else {}


def fine_tune(args, name, flags, env):
    out = os.path.join(args.work, "runs", name)
    cmd = [args.bin, "train", "--data", os.path.join(args.work, "data"),
           "--init-from", os.path.join(args.work, "model"), "--out", out, "--overwrite", "--seq", "2048", "--batch", "1", "--accum", "1", "--steps", str(args.steps),
           "--warmup", "1", "--lr", "1e-5", "--min-lr", "1e-6", "--eval-every", "0", "--eval-batches", "1",
           "--log-every", "1"] + flags
    status, tail, peak = run_measured(cmd, env)
    r = {"name": name, "flags": " ".join(flags), "status": status, "peak_rss": peak}
    if status != 0:
        r["refusal"] = [line for line in tail.splitlines() if "error" in line][-1:] or [tail[-300:]]
        return r
    rec = last_record(os.path.join(out, "metrics.jsonl"))
    r["memory"] = rec.get("memory", {})
    r["compute"] = rec.get("compute", "fp32")
    r["losses"] = tail
    return r


def memory_model(args):
    """The memory model's figures for this model (`agoq inspect`, GEMMs as the runs have them), the numbers a
    refused run is judged by."""
    res = subprocess.run([args.bin, "inspect", os.path.join(args.work, "model"), "--seq", "2048", "--json",
                          "--bf16-weights", "per-gemm"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return json.loads(res.stdout) if res.returncode == 0 else {}


CATEGORIES = ("weights", "gradients", "optimizer", "activations", "workspace")


def plot_memory(path, results, inspect):
    """Stacked bars of the tracked peak per category: each run that trained, and the memory model's figures for
    the configurations (`agoq inspect`)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    bars = [(r["name"] + "\n(measured)", r["memory"].get("peak", {})) for r in results if r["status"] == 0]
    bars += [(name + "\n(memory model)", m) for name, m in inspect.get("train_memory", {}).items()]
    fig, ax = plt.subplots(figsize=(8, 4))
    bottom = [0.0] * len(bars)
    for cat in CATEGORIES:
        vals = [m.get(cat, 0) / GIB for _, m in bars]
        ax.bar([b for b, _ in bars], vals, bottom=bottom, label=cat)
        bottom = [x + v for x, v in zip(bottom, vals)]
    ax.axhline(10, color="k", ls="--", lw=1, label="10 GiB goal")
    ax.set_ylabel("peak memory (GiB)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def report(args, results, inspect):
    lines = ["# Fine-tuning a 1B model on one machine (`agoq train --init-from`)", "",
             "Made by `scripts/evidence/finetune.py` on this machine (2 cores, 24 GiB, no GPU). The model is "
             "Llama-3.2-1B's shape with random weights (HF bf16 shards, tied embeddings, llama3 rope scaling); the data "
             "is the Austen corpus tokenized by a byte-level BPE tokenizer trained on it (8192 tokens; the model's "
             "128256 rows past them are padding). Sequence 2048, micro-batch 1, "
             f"{args.steps} steps.", ""]
    lines += ["| run | flags | result | peak RSS | tracker peak: weights | gradients | optimizer | activations | "
              "workspace | total |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        gib = lambda b: f"{b / GIB:.2f} GiB" if isinstance(b, (int, float)) else "–"
        if r["status"] == 0:  # metrics.jsonl's memory: {"peak": {category: bytes}, "peak_total": bytes, ...}
            m = r["memory"]
            cats = [gib(m.get("peak", {}).get(c)) for c in CATEGORIES]
            total = m.get("peak_total")
            lines.append(f"| {r['name']} | `{r['flags']}` ({r.get('compute', 'fp32')} GEMMs) | trained | "
                         f"{gib(r['peak_rss'])} | " + " | ".join(cats) +
                         f" | {gib(total)} |")
        else:
            lines.append(f"| {r['name']} | `{r['flags']}` | refused: {r['refusal'][0].strip()} | – | | | | | | |")
    tm = inspect.get("train_memory", {})
    ours = next((r for r in results if r["status"] == 0 and r["name"].startswith("AGoQ")), None)
    base = next((r for r in results if r["name"] == "baseline"), None)
    if ours and base:
        base_total = (base["memory"].get("peak_total") if base["status"] == 0 else
                      tm.get("baseline", {}).get("total"))
        ours_total = ours["memory"].get("peak_total")
        if base_total and ours_total:
            how = "measured" if base["status"] == 0 else "the memory model's figure, as it cannot run here"
            lines += ["", f"AGoQ + q8 states' tracked peak is **{ours_total / base_total:.4f}x** the baseline's "
                      f"({ours_total / GIB:.2f} vs {base_total / GIB:.2f} GiB; the baseline's is {how}); its peak RSS "
                      f"is {ours['peak_rss'] / GIB:.2f} GiB. Goals: AGoQ fits in 10 GiB, and its total is at most "
                      "0.45x the baseline's."]
    if tm:
        lines += ["", "The memory model (`agoq inspect`, the figures `agoq plan` and the refusal use):", "",
                  "| configuration | total |", "|---|---|"]
        for k, v in tm.items():
            lines.append(f"| {k} | {v.get('total', 0) / GIB:.2f} GiB |")
    plot_memory(os.path.join(args.out, "finetune_memory.png"), results, inspect)
    lines += ["", "![peak memory by category](finetune_memory.png)"]
    path = os.path.join(args.out, "finetune.md")
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(path + ".tmp", path)
    with open(os.path.join(args.out, "finetune.json"), "w") as f:
        json.dump({"results": results, "inspect": inspect}, f, indent=1)
    log("wrote", path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/agoq")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", default="docs/evidence")
    ap.add_argument("--work", default="/tmp/agoq_ft")
    ap.add_argument("--corpus", default="data/austen",
                    help="a prepared set (SentencePiece) whose text trains the tokenizer")
    ap.add_argument("--report-only", action="store_true", help="rewrite the report from --out/finetune.json")
    args = ap.parse_args()
    if args.report_only:
        saved = json.load(open(os.path.join(args.out, "finetune.json")))
        return report(args, saved["results"], saved["inspect"])
    os.makedirs(args.work, exist_ok=True)
    env = agoq_env()
    data = os.path.join(args.work, "data")
    text_file = os.path.join(args.work, "corpus.txt")
    if not os.path.exists(text_file):
        with open(text_file + ".tmp", "w") as f:
            f.write(corpus_text(args.corpus))
        os.replace(text_file + ".tmp", text_file)
    make_model(os.path.join(args.work, "model"), open(text_file).read())
    if not os.path.exists(os.path.join(data, "meta.json")):
        subprocess.run([args.bin, "prepare", "--input", text_file, "--tokenizer", os.path.join(args.work, "model"),
                        "--out", data], check=True)
    inspect = memory_model(args)
    results = [fine_tune(args, "AGoQ + q8 AdamW", ["--optim-state", "q8", "--lm-head-grad", "pieces",
                                                         "--bf16-weights", "per-gemm"], env),
               fine_tune(args, "baseline", ["--baseline"], env)]
    report(args, results, inspect)


def corpus_text(prepared):
    """The corpus as text: a prepared set's tokens (agoq prepare of data/janeaustenr) decoded by its SentencePiece
    model (token file: 40-byte header, then uint16 or uint32 ids; docs/data-format.md)."""
    import numpy as np
    import sentencepiece
    sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(prepared, "tokenizer.model"))
    parts = []
    for name in ("train.bin", "val.bin"):
        raw = open(os.path.join(prepared, name), "rb").read()
        dtype = np.uint16 if int.from_bytes(raw[16:20], "little") == 2 else np.uint32
        parts.append(sp.decode(np.frombuffer(raw[40:], dtype=dtype).astype(int).tolist()))
    return "".join(parts)


if __name__ == "__main__":
    main()
