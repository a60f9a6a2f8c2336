#!/usr/bin/python3
"""Evidence that fine-tuning with AGoQ learns what the unquantized run learns, rerunnable by anyone: writes a
SmolLM-135M-shaped model (dim 576, 30 layers, 9/3 heads, ffn 1536, vocab 49152, tied) with random weights as a
Hugging Face folder with a byte-level BPE tokenizer trained on the corpus (8192 tokens; the rows past them are
padding), pre-trains it with agoq on the first 80% of the Austen corpus, makes prompt/completion pairs from the
rest (a passage of three sentences -> the next sentence), and fine-tunes the pre-trained checkpoint on them twice
from the same seed: AGoQ + 8-bit AdamW states (`--optim-state q8 --lm-head-grad pieces`, GEMMs in bf16 where the CPU
has BF16) and `--baseline --compute fp32` (fp32 everything). The validation loss counts completion tokens only. Writes docs/evidence/quality.md, quality.json and
quality_loss.png.

    .venv/bin/python scripts/evidence/quality.py [--steps 500] [--out docs/evidence] [--work /tmp/agoq_quality]

Needs a built agoq (scripts/build.sh), the prepared corpus (data/austen, as scripts/test.sh makes it) and the test
venv (scripts/install-deps.sh --test: transformers, tokenizers, matplotlib from Debian). On 2 cores about 10 minutes
of pre-training and 12 per fine-tune at the defaults.
"""
import argparse
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from finetune import SMOLLM_135M, agoq_env, corpus_text, log, make_model  # noqa: E402

# AGoQ computes as `agoq train` does by default (--compute auto: bf16 GEMMs where the CPU has them); the baseline is
# the exact reference, fp32 throughout.
RUNS = {"AGoQ + q8 AdamW": ["--optim-state", "q8", "--lm-head-grad", "pieces"],
        "baseline (fp32)": ["--baseline", "--compute", "fp32"]}


def agoq(args, *cmd):
    log("+", args.bin, *cmd)
    subprocess.run([args.bin, *cmd], check=True, env=agoq_env())


def examples_write(text, path):
    """Prompt/completion pairs from running text: three sentences, then the next one as the completion."""
    sentences = [s.strip() for s in re.split(r'(?<=[.!?])\s+', " ".join(text.split())) if s.strip()]
    n = 0
    with open(path + ".tmp", "w") as f:
        for i in range(0, len(sentences) - 3, 4):
            prompt, completion = " ".join(sentences[i:i + 3]), " " + sentences[i + 3]
            if len(prompt) > 600 or len(completion) > 300 or len(completion) < 8:
                continue
            f.write(json.dumps({"prompt": prompt, "completion": completion}) + "\n")
            n += 1
    os.replace(path + ".tmp", path)
    return n


def records(run):
    """A run's per-step step, loss, val_loss and GEMM precision (metrics.jsonl without memory and timing)."""
    with open(os.path.join(run, "metrics.jsonl")) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    return [{k: r[k] for k in ("step", "loss", "val_loss", "compute") if k in r} for r in recs]


def train(args, out, data, init, steps, lr, batch, flags, extra=()):
    if os.path.exists(os.path.join(out, "ckpt", "trainer.json")):
        log("run exists:", out)
        return records(out)
    agoq(args, "train", "--data", data, "--init-from", init, "--out", out, "--overwrite", "--seq", str(args.seq),
         "--batch", str(batch), "--steps", str(steps), "--warmup", str(max(1, steps // 20)), "--lr", str(lr),
         "--min-lr", str(lr / 10), "--log-every", "10", "--quiet", *extra, *flags)
    return records(out)


def report(args, runs, n_examples, pretrain_val):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.figure(figsize=(7, 4))
    for name, recs in runs.items():
        val = [(r["step"], r["val_loss"]) for r in recs if "val_loss" in r]
        plt.plot(*zip(*val), marker="o", ms=3, label=name)
    plt.xlabel("fine-tuning step")
    plt.ylabel("validation loss (completion tokens)")
    plt.legend()
    plt.grid(alpha=0.3)
    plt.tight_layout()
    plt.savefig(os.path.join(args.out, "quality_loss.png"), dpi=120)
    final = {name: [r["val_loss"] for r in recs if "val_loss" in r][-1] for name, recs in runs.items()}
    ours, base = final["AGoQ + q8 AdamW"], final["baseline (fp32)"]
    curves = [[r["val_loss"] for r in recs if "val_loss" in r] for recs in runs.values()]
    worst = max(abs(a - b) / b for a, b in zip(*curves))
    lines = ["# Fine-tuning quality: AGoQ against the unquantized run", "",
             "Made by `scripts/evidence/quality.py` on this machine (2 cores, no GPU). A SmolLM-135M-shaped model "
             "(dim 576, 30 layers, 9/3 heads, ffn 1536, vocabulary 49152 tied; random weights written by transformers, "
             "a byte-level BPE tokenizer of 8192 tokens trained on the corpus) is pre-trained by agoq for "
             f"{args.pretrain_steps} steps on the first 80% of the Austen corpus (validation loss then "
             f"{pretrain_val:.4f}), then fine-tuned for {args.steps} "
             f"steps on {n_examples} prompt/completion pairs made from the rest (three sentences, then the next one; "
             f"the last 10% held out), sequence {args.seq}, micro-batch {args.batch}, the same seed and data order for "
             "both runs. The loss counts completion tokens only.", "",
             "| run | flags | validation loss at the end |", "|---|---|---|"]
    for name, flags in RUNS.items():
        compute = next((r["compute"] for r in reversed(runs[name]) if "compute" in r), "fp32")
        lines.append(f"| {name} | `{' '.join(flags)}` ({compute} GEMMs) | {final[name]:.4f} |")
    lines += ["", f"AGoQ's final validation loss is **{(ours - base) / base * 100:+.2f}%** from the baseline's "
              f"(goal: within 1%); over the {len(curves[0])} evaluations the curves differ by at most "
              f"{worst * 100:.2f}%.", "", "![validation loss](quality_loss.png)"]
    with open(os.path.join(args.out, "quality.md") + ".tmp", "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(os.path.join(args.out, "quality.md") + ".tmp", os.path.join(args.out, "quality.md"))
    with open(os.path.join(args.out, "quality.json"), "w") as f:
        json.dump({"final_val_loss": final, "n_examples": n_examples, "pretrain_val_loss": pretrain_val,
                   "args": {k: getattr(args, k) for k in ("steps", "pretrain_steps", "seq", "batch")}, "runs": runs},
                  f, indent=1)
    log("wrote", os.path.join(args.out, "quality.md"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/agoq")
    ap.add_argument("--steps", type=int, default=500, help="fine-tuning steps")
    ap.add_argument("--pretrain-steps", type=int, default=200)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--out", default="docs/evidence")
    ap.add_argument("--work", default="/tmp/agoq_quality")
    ap.add_argument("--corpus", default="data/austen", help="a prepared set whose text is the corpus")
    ap.add_argument("--report-only", action="store_true", help="rewrite the report from --out/quality.json")
    args = ap.parse_args()
    if args.report_only:
        saved = json.load(open(os.path.join(args.out, "quality.json")))
        vars(args).update(saved["args"])  # the report describes the runs it was made from
        return report(args, saved["runs"], saved["n_examples"], saved["pretrain_val_loss"])
    os.makedirs(args.work, exist_ok=True)
    w = lambda *p: os.path.join(args.work, *p)
    text = corpus_text(args.corpus)
    cut = int(len(text) * 0.8)
    with open(w("pretrain.txt"), "w") as f:
        f.write(text[:cut])
    n_examples = examples_write(text[cut:], w("examples.jsonl"))
    log(f"{n_examples} prompt/completion pairs")
    make_model(w("model"), text[:cut], SMOLLM_135M, shard_size="5GB")
    if not os.path.exists(w("pretrain_data", "meta.json")):
        agoq(args, "prepare", "--input", w("pretrain.txt"), "--tokenizer", w("model"), "--out", w("pretrain_data"))
    pretrain = train(args, w("runs", "pretrain"), w("pretrain_data"), w("model"), args.pretrain_steps, 1e-3, 2, [],
                     ["--eval-every", "0"])
    pretrained = w("runs", "pretrain", "ckpt")
    if not os.path.exists(w("sft_data", "meta.json")):
        agoq(args, "prepare", "--input", w("examples.jsonl"), "--format", "prompt-completion", "--tokenizer",
             pretrained, "--seq", str(args.seq), "--overlong", "truncate", "--val-fraction", "0.1", "--out",
             w("sft_data"))
    runs = {name: train(args, w("runs", re.sub(r"\W+", "_", name)), w("sft_data"), pretrained, args.steps, 2e-4,
                        args.batch, flags, ["--eval-every", str(max(1, args.steps // 10)), "--eval-batches", "20"])
            for name, flags in RUNS.items()}
    report(args, runs, n_examples, [r["val_loss"] for r in pretrain if "val_loss" in r][-1])


if __name__ == "__main__":
    main()
