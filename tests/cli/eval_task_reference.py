"""References for `agoq eval --task` (tests/cli/test_eval_task.cpp), run with the project's .venv.

  make OUT bpe|spm|gguf
      a random LlamaForCausalLM saved by transformers in fp32 (OUT/bpe: a byte-level BPE tokenizer; OUT/spm: a
      SentencePiece tokenizer.model), a 96-token context so that windows and truncation are exercised, and OUT/data: items of every task form agoq reads (written here, with the text cleaning and prompts' corner
      cases), plus PIQA's original valid.jsonl + valid-labels.lst; OUT/gguf: an HF model and its GGUF conversion
      (tests/formats/gguf_reference.py's, llama.cpp's names and row order)
  lm-eval OUT MODEL RESULT
      lm-evaluation-harness (HF backend, fp32, --log_samples) on those files: each task is lm-eval's own task YAML
      (included from the installed package) with its dataset replaced by the local file; `mc` and `ppl` are plain
      multiple_choice and loglikelihood_rolling YAMLs. RESULT: JSON {task: {metrics, samples: [{lls, greedy, ...}]}}
"""
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "formats")]
import gguf_reference  # noqa: E402
from import_reference import make_tokenizer, sample_text  # noqa: E402

WINDOW = 96


def model_save(out, vocab, bos, eos, seed):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=WINDOW,
                      rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=bos,
                      eos_token_id=eos, initializer_range=0.2)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # norms away from 1, so a norm read wrongly shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    model.save_pretrained(out, safe_serialization=True)


def make_spm(out, text):
    import io
    import sentencepiece as spm
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(text.splitlines()), model_writer=model, model_type="bpe",
                                   vocab_size=500, byte_fallback=True, character_coverage=1.0,
                                   normalization_rule_name="identity", remove_extra_whitespaces=False,
                                   add_dummy_prefix=True, split_digits=True, num_threads=1, minloglevel=2)
    with open(os.path.join(out, "tokenizer.model"), "wb") as f:
        f.write(model.getvalue())
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "bos_token": "<s>",
                   "eos_token": "</s>", "unk_token": "<unk>", "legacy": True}, f)
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    return sp.get_piece_size(), sp.bos_id(), sp.eos_id()


class Words:
    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.words = [w for w in sample_text().split() if w.isascii()][:600] + ["café", "naïve", "Ünïcödé"]

    def text(self, lo, hi):
        return " ".join(self.rng.choice(self.words) for _ in range(self.rng.randint(lo, hi)))

    def pick(self, *xs):
        return self.rng.choice(xs)


def items(w, n):
    """Every task's items: the corner cases of each form's cleaning and prompt first, then random ones."""
    d = {}
    d["hellaswag"] = [{"activity_label": w.pick("Baking cookies", "Home and Garden"),
                       "ctx_a": w.text(3, 12) + w.pick("", " [title] How to x", "  double", " [step] y"),
                       "ctx_b": w.pick("", "then THE Man", "and.", w.text(1, 5), "üBER alles"),
                       "endings": [w.text(1, 8) + w.pick("", " [header] z [substeps]", "  two", " [title] t")
                                   for _ in range(4)],
                       "label": str(w.rng.randint(0, 3))} for _ in range(n)]
    d["hellaswag"][0]["ctx_a"] = w.text(90, 100)  # longer than the window: truncated from the left
    d["piqa"] = [{"goal": w.text(2, 10), "sol1": w.text(1, 8), "sol2": w.text(1, 8), "label": w.rng.randint(0, 1)}
                 for _ in range(n)]
    d["arc_easy"] = []
    for i in range(n):
        labels = ["A", "B", "C", "D"] if i % 3 else ["1", "2", "3"]
        d["arc_easy"].append({"question": w.text(3, 12) + "?", "choices": {"text": [w.text(1, 5) for _ in labels],
                              "label": labels}, "answerKey": w.pick(*labels)})
    d["mmlu"] = [{"question": w.pick("", "  ", "\n") + w.text(3, 12) + w.pick("", " ", "\n"),
                  "subject": w.pick("high_school_physics", "anatomy"),
                  "choices": [w.text(1, 4) for _ in range(4)], "answer": w.rng.randint(0, 3)} for _ in range(n)]
    d["lambada"] = [{"text": w.text(4, 20) + w.pick("", " x.", "  twice")} for _ in range(n)]
    d["winogrande"] = [{"sentence": w.text(2, 8) + " _ " + w.text(2, 8) + w.pick("", " ", "."),
                        "option1": w.text(1, 2), "option2": w.text(1, 2), "answer": w.pick("1", "2")}
                       for _ in range(n)]
    d["mc"] = [{"context": w.text(1, 10) + w.pick("", " ", "\n", ":  "),
                "choices": [w.text(1, 6) for _ in range(w.rng.randint(2, 5))]} for _ in range(n)]
    d["mc"][1]["context"] = ""  # the choice follows the prefix token
    for it in d["mc"]:
        it["label"] = w.rng.randint(0, len(it["choices"]) - 1)
    d["ppl"] = [{"text": w.text(20, 150).replace(" ", w.pick(" ", "\n", "  "), 3)} for _ in range(max(3, n // 3))]
    return d


def make(out, kind):
    """OUT/data, and the model of `kind`: bpe, spm or gguf (an HF folder OUT/gguf/hf and OUT/gguf/model-F32.gguf)."""
    text = sample_text()
    d = os.path.join(out, kind)
    os.makedirs(d, exist_ok=True)
    if kind == "bpe":
        model_save(d, *make_tokenizer(d, text, 400), 11)
    elif kind == "spm":
        model_save(d, *make_spm(d, text), 12)
    else:
        cfg, tensors, fields, _ = gguf_reference.model_make(d, False, gguf_reference.TEXT * 4)
        gguf_reference.gguf_model_write(os.path.join(d, "model-F32.gguf"), cfg, tensors, fields, "F32")
    data = os.path.join(out, "data")
    os.makedirs(data, exist_ok=True)
    for name, rows in items(Words(5), 9).items():
        with open(os.path.join(data, name + ".jsonl"), "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        if name == "piqa":  # the original form: no labels in the lines, one a line in valid-labels.lst
            with open(os.path.join(data, "valid.jsonl"), "w", encoding="utf-8") as f:
                f.writelines(json.dumps({k: r[k] for k in ("goal", "sol1", "sol2")}) + "\n" for r in rows)
            with open(os.path.join(data, "valid-labels.lst"), "w") as f:
                f.writelines(f"{r['label']}\n" for r in rows)


TASKS = ["hellaswag", "piqa", "arc_easy", "mmlu", "lambada", "winogrande", "mc", "ppl"]


def task_yamls(files, yaml_dir):
    """lm-eval's own task definitions over local files ({agoq task name: JSON-lines file}; agoq's name -> lm-eval's
    task name, returned), written into yaml_dir. Also used by scripts/evidence/downstream.py."""
    import lm_eval
    tasks = os.path.join(os.path.dirname(lm_eval.__file__), "tasks")
    own = {"hellaswag": "hellaswag/hellaswag.yaml", "piqa": "piqa/piqa.yaml", "arc_easy": "arc/arc_easy.yaml",
           "mmlu": "mmlu/default/_default_template_yaml", "lambada": "lambada/lambada_openai.yaml",
           "winogrande": "winogrande/default.yaml"}
    names = {}
    for name, file in files.items():
        y = {"task": "agoq_" + name, "dataset_path": "json", "dataset_name": None, "training_split": None,
             "validation_split": None, "test_split": "test", "fewshot_split": None,
             "dataset_kwargs": {"data_files": {"test": os.path.abspath(file)}}}
        if name in own:
            y["include"] = os.path.join(tasks, own[name])
        if name == "mmlu":
            names["agoq_mmlu"] = mmlu_group_yamls(y, file, yaml_dir)
            continue
        if name == "mc":
            y.update(output_type="multiple_choice", doc_to_text="context", doc_to_choice="choices",
                     doc_to_target="label", metric_list=[{"metric": "acc"}, {"metric": "acc_norm"}])
        if name == "ppl":
            y.update(output_type="loglikelihood_rolling", doc_to_text="", doc_to_target="text",
                     metric_list=[{"metric": m} for m in ("word_perplexity", "byte_perplexity", "bits_per_byte")])
        with open(os.path.join(yaml_dir, name + ".yaml"), "w") as f:
            json.dump(y, f)  # JSON is YAML
        names["agoq_" + name] = name
    return names


def mmlu_group_yamls(y, file, yaml_dir):
    """lm-eval's mmlu is a group of one task per subject (each with its subject line), the group's acc weighted by
    size and its stderr pooled over the subjects': the group agoq_mmlu over the file's subjects, each item keeping
    its place in the file (agoq_index) so that task_report can put the samples back in order. Returns "mmlu"."""
    with open(file) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    subtasks = []
    for subject in sorted({r["subject"] for r in rows}):
        sub_file = os.path.join(yaml_dir, f"mmlu_{subject}.jsonl")
        with open(sub_file, "w") as f:
            for i, r in enumerate(rows):
                if r["subject"] == subject:
                    f.write(json.dumps(dict(r, agoq_index=i)) + "\n")
        subtasks.append(f"agoq_mmlu_{subject}")
        sub = dict(y, task=subtasks[-1], dataset_kwargs={"data_files": {"test": sub_file}},
                   description="The following are multiple choice questions (with answers) about "
                               f"{subject.replace('_', ' ')}.\n\n")
        with open(os.path.join(yaml_dir, f"mmlu_{subject}.yaml"), "w") as f:
            json.dump(sub, f)
    with open(os.path.join(yaml_dir, "mmlu.yaml"), "w") as f:
        json.dump({"group": "agoq_mmlu", "task": subtasks,
                   "aggregate_metric_list": [{"metric": "acc", "weight_by_size": True}]}, f)
    return "mmlu"


def task_report(res, task):
    """One task (or group: its subtasks' samples in file order) of simple_evaluate's result (with log_samples):
    {metrics, samples: [{doc_id, lls, greedy, acc...}]} in document order."""
    metrics = {k.split(",")[0]: v for k, v in res["results"][task].items() if k.endswith(",none")}
    samples = []
    if task in res.get("group_subtasks", {}) and res["group_subtasks"][task]:
        subs = [dict(s, doc_id=s["doc"]["agoq_index"]) for t in res["group_subtasks"][task] for s in res["samples"][t]]
    else:
        subs = res["samples"][task]
    for s in sorted(subs, key=lambda s: s["doc_id"]):
        resps = [r[0] for r in s["resps"]]
        samples.append({"doc_id": s["doc_id"], "lls": [float(r[0]) if isinstance(r, (list, tuple)) else float(r)
                                                       for r in resps],
                        "greedy": [bool(r[1]) for r in resps if isinstance(r, (list, tuple))],
                        **{m: s[m] for m in ("acc", "acc_norm") if m in s}})
    return {"metrics": metrics, "samples": samples}


def run_lm_eval(out, model, result):
    import lm_eval
    from lm_eval.tasks import TaskManager
    yaml_dir = os.path.join(out, "yaml")
    os.makedirs(yaml_dir, exist_ok=True)
    names = task_yamls({n: os.path.join(out, "data", n + ".jsonl") for n in TASKS}, yaml_dir)
    slow = ",use_fast_tokenizer=False" if os.path.exists(os.path.join(model, "tokenizer.model")) else ""
    res = lm_eval.simple_evaluate(model="hf", model_args=f"pretrained={model},dtype=float32{slow}",
                                  tasks=sorted(names), task_manager=TaskManager(include_path=yaml_dir),
                                  log_samples=True, batch_size=8, device="cpu", bootstrap_iters=100)
    report = {name: task_report(res, task) for task, name in names.items()}
    with open(result, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "lm-eval":
        os.environ.update(HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
                          HF_DATASETS_CACHE=os.path.join(sys.argv[2], "hf_datasets_cache"))
        run_lm_eval(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(f"unknown command {sys.argv[1]}")
