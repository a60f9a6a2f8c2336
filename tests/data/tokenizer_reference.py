"""The references of tests/data/test_tokenizer_bpe.cpp: tokenizers built here with Hugging Face `tokenizers` (and a
Llama-style tokenizer.model with `sentencepiece`), and the ids those libraries give.

  make OUT TEXT SMALL SAMPLES
        builds OUT/<name>/ for each tokenizer below, trained on the start of TEXT, and writes OUT/<name>/text.ids
        (int32 LE: tokenizers' ids of the whole of TEXT, or of SMALL for the variants, no special tokens, as
        AutoTokenizer's backend gives them) and OUT/<name>/samples.json (for each string of the JSON list SAMPLES:
        ids without and with special tokens, AutoTokenizer's, and the decode)
  seeds OUT
        small tokenizer.json files for the tokenizer_json fuzz target (tests/fuzz/corpus/tokenizer_json)
  encode SAMPLES OUT DIR...
        AutoTokenizer's ids of each sample (with special tokens) for the tokenizer in each DIR
"""
import json
import os
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

GPT2_REGEX = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"] + [
    f"<|reserved_special_token_{i}|>" for i in range(6)]
TRAIN_BYTES = 400_000
VOCAB = 3000


def train(pre, text, specials):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=specials, show_progress=False)
    lines = text[:TRAIN_BYTES].splitlines(keepends=True)
    tok.train_from_iterator(lines, trainer)
    return tok


def save(tok, out, name, config, edit=None):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "tokenizer.json")
    tok.save(path)
    if edit:  # fields the Python API does not reach
        j = json.load(open(path, encoding="utf-8"))
        edit(j)
        json.dump(j, open(path, "w", encoding="utf-8"), ensure_ascii=False)
    if config is not None:
        json.dump(config, open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8"))
    return d


def build(out, text):
    dirs = {}
    # (a) byte-level BPE trained on the text: ByteLevel with GPT-2's regex, one special token, no config.
    tok = train(pre_tokenizers.ByteLevel(add_prefix_space=False), text, ["<|endoftext|>"])
    dirs["trained"] = save(tok, out, "trained", None)
    # (b) GPT-2 style: ByteLevel post-processor; tokenizer.json says add_prefix_space true, GPT2TokenizerFast resets
    # it to the config's (absent: false).
    tok = train(pre_tokenizers.ByteLevel(add_prefix_space=True), text, ["<|endoftext|>"])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    dirs["gpt2"] = save(tok, out, "gpt2", {"tokenizer_class": "GPT2Tokenizer", "bos_token": "<|endoftext|>",
                                           "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"})
    # (b') the same with the prefix space kept (no class that resets it), and added tokens that strip and match
    # single words.
    tok.add_tokens([AddedToken("<mask>", lstrip=True, rstrip=False, special=True, normalized=False),
                    AddedToken("tok", single_word=True, special=False),
                    AddedToken("[end]", rstrip=True, special=False, normalized=True)])
    dirs["gpt2_prefix"] = save(tok, out, "gpt2_prefix", {"tokenizer_class": "PreTrainedTokenizerFast"})
    # (c) Llama 3 style: Split with Llama 3's regex then ByteLevel without one, ignore_merges, special tokens after
    # the vocabulary, BOS added by TemplateProcessing.
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok = train(pre, text, [])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in LLAMA3_SPECIALS])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])

    def ignore_merges(j):
        j["model"]["ignore_merges"] = True
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
              "eos_token": "<|end_of_text|>", "clean_up_tokenization_spaces": True}
    dirs["llama3"] = save(tok, out, "llama3", config, ignore_merges)
    # (c') the same files under LlamaTokenizerFast, which rebuilds the template: EOS added, BOS not.
    dirs["llama3_class"] = save(tok, out, "llama3_class", dict(config, tokenizer_class="LlamaTokenizerFast",
                                                               add_bos_token=False, add_eos_token=True), ignore_merges)
    # (d) SmolLM style: digits one by one, then ByteLevel with its regex.
    pre = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok = train(pre, text, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    dirs["smollm"] = save(tok, out, "smollm", {"tokenizer_class": "GPT2Tokenizer", "bos_token": "<|im_start|>",
                                               "eos_token": "<|im_end|>"})
    return dirs


def sentencepiece_model(out, text):
    import io
    import sentencepiece as spm
    d = os.path.join(out, "llama_spm")
    os.makedirs(d, exist_ok=True)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(text[:TRAIN_BYTES].splitlines()), model_writer=model,
                                   model_type="bpe", vocab_size=1000, byte_fallback=True, character_coverage=1.0,
                                   normalization_rule_name="identity", remove_extra_whitespaces=False,
                                   add_dummy_prefix=True, split_digits=True, allow_whitespace_only_pieces=True,
                                   num_threads=1, minloglevel=2)
    open(os.path.join(d, "tokenizer.model"), "wb").write(model.getvalue())
    json.dump({"tokenizer_class": "LlamaTokenizer", "add_bos_token": True},
              open(os.path.join(d, "tokenizer_config.json"), "w"))
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    return d, sp


def write_ids(path, ids):
    import array
    a = array.array("i", ids)
    assert a.itemsize == 4 and sys.byteorder == "little"
    open(path, "wb").write(a.tobytes())


# The variants of a tokenizer already compared on the whole text are compared on its first part (SMALL).
SMALL = {"gpt2_prefix", "llama3_class", "smollm"}


def load(d):
    from transformers import AutoTokenizer
    auto = AutoTokenizer.from_pretrained(d) if os.path.exists(os.path.join(d, "tokenizer_config.json")) else None
    return auto, (auto.backend_tokenizer if auto else Tokenizer.from_file(os.path.join(d, "tokenizer.json")))


def encode_text(job):
    d, text = job
    write_ids(os.path.join(d, "text.ids"), load(d)[1].encode(text, add_special_tokens=False).ids)


def make(out, text_path, small_path, samples_path):
    from concurrent.futures import ProcessPoolExecutor
    text = open(text_path, encoding="utf-8", newline="").read()  # "\r" stays
    small = open(small_path, encoding="utf-8", newline="").read()
    samples = json.load(open(samples_path, encoding="utf-8"))
    dirs = build(out, text)
    for name, d in dirs.items():
        auto, backend = load(d)
        rows = []
        for s in samples:
            plain = backend.encode(s, add_special_tokens=False).ids
            model = auto(s, add_special_tokens=True)["input_ids"] if auto else backend.encode(s).ids
            rows.append({"plain": plain, "model": model, "decode": backend.decode(plain, skip_special_tokens=False)})
        json.dump(rows, open(os.path.join(d, "samples.json"), "w"))
    # The whole texts are the slow part (tokenizers takes one long string at about 1 MB/s): one process each.
    jobs = [(d, small if name in SMALL else text) for name, d in dirs.items()]
    with ProcessPoolExecutor(max_workers=max(1, min(len(jobs), os.cpu_count() or 1))) as pool:
        list(pool.map(encode_text, jobs))
    d, sp = sentencepiece_model(out, text)
    write_ids(os.path.join(d, "text.ids"), sp.encode(text))
    json.dump([{"plain": sp.encode(s), "model": [sp.bos_id()] + sp.encode(s), "decode": sp.decode(sp.encode(s))}
               for s in samples], open(os.path.join(d, "samples.json"), "w"))


def encode(samples_path, out, *dirs):
    from transformers import AutoTokenizer
    samples = json.load(open(samples_path, encoding="utf-8"))
    autos = [AutoTokenizer.from_pretrained(d) for d in dirs]
    json.dump([[a(s, add_special_tokens=True)["input_ids"] for s in samples] for a in autos], open(out, "w"))


def seeds(out):
    """Small tokenizer.json files (300 tokens) for the tokenizer_json fuzz target's corpus."""
    text = ("It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in "
            "want of a wife. 1234 5678 caf\u00e9 \u65e5\u672c\n  int main() { return 0; }\n") * 20
    global VOCAB, TRAIN_BYTES
    VOCAB, TRAIN_BYTES = 300, len(text)
    os.makedirs(out, exist_ok=True)
    tmp = os.path.join(out, ".build")
    dirs = build(tmp, text)
    seed = lambda name, body: open(os.path.join(out, "seed-" + name), "w", encoding="utf-8").write(body)
    for name in ["trained", "gpt2", "gpt2_prefix", "llama3", "smollm"]:
        seed(name, open(os.path.join(dirs[name], "tokenizer.json"), encoding="utf-8").read())
    for name in ["gpt2", "llama3_class"]:
        body = open(os.path.join(dirs[name], "tokenizer.json"), encoding="utf-8").read()
        seed(name + "-config", body + "\n#config\n" + open(os.path.join(dirs[name], "tokenizer_config.json")).read())
    j = json.load(open(os.path.join(dirs["gpt2"], "tokenizer.json"), encoding="utf-8"))
    j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]
    seed("legacy-merges", json.dumps(j, ensure_ascii=False))
    for name, edit in [("nfc", lambda j: j.update(normalizer={"type": "NFC"})),
                       ("removed", lambda j: j["pre_tokenizer"].update(type="Split", pattern={"String": " "},
                                                                        behavior="Removed", invert=False)),
                       ("unigram", lambda j: j["model"].update(type="Unigram"))]:
        j = json.load(open(os.path.join(dirs["gpt2"], "tokenizer.json"), encoding="utf-8"))
        edit(j)
        seed(name, json.dumps(j, ensure_ascii=False))
    import shutil
    shutil.rmtree(tmp)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    {"make": make, "encode": encode, "seeds": seeds}[sys.argv[1]](*sys.argv[2:])
