"""The references of tests/data/test_tokenizer_normalizer.cpp: Hugging Face `tokenizers`' ids of each sample for
each tokenizer.json given (the project's .venv).

  encode SAMPLES OUT FILE...
        OUT: a JSON list, per FILE, of the ids of each string of the JSON list SAMPLES (no special tokens added)
"""
import json
import sys

from tokenizers import Tokenizer


def encode(samples_path, out, *files):
    samples = json.load(open(samples_path, encoding="utf-8"))
    toks = [Tokenizer.from_file(f) for f in files]
    json.dump([[t.encode(s, add_special_tokens=False).ids for s in samples] for t in toks], open(out, "w"))


if __name__ == "__main__":
    {"encode": encode}[sys.argv[1]](*sys.argv[2:])
