"""References for the import tests (tests/cli/test_import.cpp), run with the project's .venv.

  make-hf OUT [--tied] [--rope llama3|linear|none] [--mistral]
      a random LlamaForCausalLM (GQA) saved by transformers in bf16, sharded, with a byte-level BPE tokenizer
      (trained here by `tokenizers`, BOS added by its post-processor as Llama 3's is) and a text to score
  f16-round HF OUT
      a copy of an HF folder whose matrices are rounded to fp16 (kept in fp32), as a GGUF F16 file holds them (its
      1-D tensors stay F32)
  score MODEL TEXT SEQ PROMPT N
      transformers' fp32 forward on the text as AutoTokenizer encodes it, scored in windows of SEQ tokens that do not
      overlap (as `agoq eval`): JSON {tokens, loss, last_logits, prompt_ids, greedy_ids (N tokens)}
"""
import json
import math
import os
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def sample_text():
    parts = ["It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in "
             "want of a wife.\n", "int main() { return 0; }  // 42 3.14159 1,000,000\n", "Ünïcödé: 日本語のテキスト 🙂🚀\n",
             "    indented\n\n\n  spaces   and\ttabs\n"]
    lic = "/usr/share/common-licenses"
    for name in sorted(os.listdir(lic))[:6]:
        path = os.path.join(lic, name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                parts.append(f.read()[:6000])
    return "".join(parts)


CHATML_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                   "{% endfor %}")


def make_tokenizer(out, text, vocab, chatml=False):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(pattern=__import__("tokenizers").Regex(LLAMA3_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>"] + (["<|im_start|>", "<|im_end|>"] if chatml else [])
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([text], trainer)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                       pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                                       special_tokens=[("<|begin_of_text|>", bos)])
    tok.save(os.path.join(out, "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
              "eos_token": "<|end_of_text|>", "model_max_length": 128}
    if chatml:
        config["chat_template"] = CHATML_TEMPLATE
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f)
    return tok.get_vocab_size(), bos, tok.token_to_id("<|end_of_text|>")


def make_hf(out, tied, rope, mistral, chatml=False):
    os.makedirs(out, exist_ok=True)
    text = sample_text()
    with open(os.path.join(out, "text.txt"), "w") as f:
        f.write(text)
    vocab, bos, eos = make_tokenizer(out, text, 400, chatml)
    scaling = {"llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 64},
               "linear": {"rope_type": "linear", "factor": 2.0}, "none": None}[rope]
    kw = dict(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=10000.0,
              tie_word_embeddings=tied, bos_token_id=bos, eos_token_id=eos, initializer_range=0.2)
    if mistral:
        cfg, cls = MistralConfig(sliding_window=None, **kw), MistralForCausalLM
    else:
        cfg, cls = LlamaConfig(rope_scaling=scaling, **kw), LlamaForCausalLM
    torch.manual_seed(7)
    model = cls(cfg)
    with torch.no_grad():  # norms away from 1, so a norm read wrongly shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    model.to(torch.bfloat16).save_pretrained(out, max_shard_size="40KB", safe_serialization=True)


def score(model_dir, text_path, seq, prompt, n):
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    model.eval()
    with open(text_path, encoding="utf-8") as f:
        ids = tok(f.read())["input_ids"]
    total, count, last = 0.0, 0, None
    with torch.no_grad():
        for start in range(0, len(ids) - 1, seq):
            window = ids[start:start + seq + 1]
            x = torch.tensor([window[:-1]])
            y = torch.tensor(window[1:])
            logits = model(x).logits[0].double()
            total += torch.nn.functional.cross_entropy(logits, y, reduction="sum").item()
            count += len(window) - 1
        last_start = (len(ids) - 2) // seq * seq
        last = model(torch.tensor([ids[last_start:]])).logits[0, -1].tolist()
        prompt_ids = tok(prompt)["input_ids"]
        cur = list(prompt_ids)
        greedy = []
        for _ in range(n):  # by hand: generate() does not run on this Python with torch 1.13
            window = cur[-model.config.max_position_embeddings:]
            nxt = int(torch.argmax(model(torch.tensor([window])).logits[0, -1]))
            greedy.append(nxt)
            cur.append(nxt)
    print(json.dumps({"tokens": count, "loss": total / count, "last_logits": last, "prompt_ids": prompt_ids,
                      "greedy_ids": greedy}))


def examples(model_dir, jsonl):
    """Per line of a prompt/completion file, transformers' tokens of the example and which count in the loss:
    BOS + prompt + completion + EOS (the completion and EOS counted), or for `messages` the chat template's tokens
    (rendered whole, as apply_chat_template renders it) + EOS, the assistant contents and their <|im_end|> counted."""
    tok = AutoTokenizer.from_pretrained(model_dir)
    out = []
    with open(jsonl, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            ex = json.loads(line)
            if "messages" in ex:
                # The chat template (CHATML_TEMPLATE) rendered as a whole and tokenized at once, as
                # apply_chat_template does (it needs jinja2, which this venv does not carry).
                text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in ex["messages"])
                ids = tok(text, add_special_tokens=False)["input_ids"]
                end = tok.convert_tokens_to_ids("<|im_end|>")
                loss, inside = [], False
                # Assistant content: after "<|im_start|>assistant\n", up to and including its <|im_end|>.
                head = tok("assistant\n", add_special_tokens=False)["input_ids"]
                start = tok.convert_tokens_to_ids("<|im_start|>")
                i = 0
                while i < len(ids):
                    if ids[i] == start and ids[i + 1:i + 1 + len(head)] == head:
                        n = 1 + len(head)
                        loss += [0] * n
                        i += n
                        inside = True
                        continue
                    loss.append(1 if inside else 0)
                    if ids[i] == end:
                        inside = False
                    i += 1
                ids, loss = [tok.bos_token_id] + ids + [tok.eos_token_id], [0] + loss + [0]
            else:
                p = tok(ex["prompt"], add_special_tokens=False)["input_ids"]
                c = tok(ex["completion"], add_special_tokens=False)["input_ids"]
                ids = [tok.bos_token_id] + p + c + [tok.eos_token_id]
                loss = [0] * (1 + len(p)) + [1] * (len(c) + 1)
            out.append({"ids": ids, "loss": loss})
    print(json.dumps(out))


def f16_round(hf, out):
    model = AutoModelForCausalLM.from_pretrained(hf, torch_dtype=torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.copy_(p.half().float())
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(hf).save_pretrained(out)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "make-hf":
        rope = sys.argv[sys.argv.index("--rope") + 1] if "--rope" in sys.argv else "none"
        make_hf(sys.argv[2], "--tied" in sys.argv, rope, "--mistral" in sys.argv, "--chatml" in sys.argv)
    elif cmd == "examples":
        examples(sys.argv[2], sys.argv[3])
    elif cmd == "f16-round":
        f16_round(sys.argv[2], sys.argv[3])
    elif cmd == "score":
        score(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], int(sys.argv[6]))
    else:
        sys.exit("unknown command " + cmd)
