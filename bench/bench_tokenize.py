"""The reference side of `agoq bench tokenize`: HF tokenizers (and the sentencepiece package) timed on the text
agoq times, in the same run. Prints one JSON object on stdout.

  bench_tokenize.py TEXT SPM_MODEL OUT REPS [BPE_DIR]

Without BPE_DIR a Llama-3-style byte-level BPE (Split with Llama 3's regex, ByteLevel, ignore_merges, 32k tokens) is
trained with tokenizers on the start of TEXT into OUT/bpe. Timings are the best of REPS; OUT/hf.ids and OUT/sp.ids
(int32 LE) hold the ids, for agoq to compare with its own.
"""
import array
import json
import os
import sys
import time

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")


def train_bpe(text, out):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=32000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|begin_of_text|>", "<|end_of_text|>"], show_progress=False)
    tok.train_from_iterator(text[:4_000_000].splitlines(keepends=True), trainer)
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "tokenizer.json")
    tok.save(path)
    j = json.load(open(path, encoding="utf-8"))
    j["model"]["ignore_merges"] = True
    json.dump(j, open(path, "w", encoding="utf-8"), ensure_ascii=False)


def best(reps, fn):
    times, result = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def main(text_path, spm_path, out, reps, bpe_dir=""):
    import sentencepiece as spm
    from tokenizers import Tokenizer
    reps = int(reps)
    text = open(text_path, encoding="utf-8", newline="").read()
    if not bpe_dir:
        bpe_dir = os.path.join(out, "bpe")
        train_bpe(text, bpe_dir)
    tok = Tokenizer.from_file(bpe_dir if bpe_dir.endswith(".json") else os.path.join(bpe_dir, "tokenizer.json"))
    hf_s, enc = best(reps, lambda: tok.encode(text, add_special_tokens=False))
    lines = text.splitlines(keepends=True)
    batch_s, _ = best(reps, lambda: tok.encode_batch(lines, add_special_tokens=False))
    sp = spm.SentencePieceProcessor(model_file=spm_path)
    sp_s, sp_ids = best(reps, lambda: sp.encode(text))
    open(os.path.join(out, "hf.ids"), "wb").write(array.array("i", enc.ids).tobytes())
    open(os.path.join(out, "sp.ids"), "wb").write(array.array("i", sp_ids).tobytes())
    import tokenizers
    print(json.dumps({"bpe_dir": bpe_dir, "hf_encode_s": hf_s, "hf_batch_s": batch_s, "sp_s": sp_s,
                      "hf_tokens": len(enc.ids), "sp_tokens": len(sp_ids), "tokenizers": tokenizers.__version__,
                      "sentencepiece": spm.__version__, "cpus": os.cpu_count()}))


if __name__ == "__main__":
    main(*sys.argv[1:])
