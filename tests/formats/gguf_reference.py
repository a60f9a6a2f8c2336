"""The GGUF references of tests/formats/test_gguf.cpp, made with gguf-py (the pinned `gguf` package in .venv).

  gguf_reference.py quants OUT   one GGUF per tensor type in OUT/<TYPE>.gguf (two tensors, "a" [4, 512] and
                                 "b" [2, 3, 256]) and OUT/<TYPE>.f32: gguf.quants.dequantize of both, read back
                                 from the file, as raw little-endian float32 (a, then b). Types gguf-py can quantize
                                 are quantized from random floats; the K-quants' blocks are random bytes with finite
                                 fp16 scales. OUT/meta.gguf holds one key of every value type GGUFWriter can write.
  gguf_reference.py model OUT    a random LlamaForCausalLM (GQA: 4 heads, 2 kv heads) saved by transformers in
                                 OUT/hf (untied) and OUT/hf_tied, each also as GGUF F32 and F16 (OUT/untied-F32.gguf,
                                 ...) the way llama.cpp's convert_hf_to_gguf.py writes them (its tensor names, its
                                 q/k row order, a gpt2 tokenizer in the metadata), plus variants agoq must refuse
                                 (OUT/bad-<what>.gguf), OUT/untied-Q8_0.gguf with the values it must give in
                                 OUT/untied-Q8_0.safetensors, OUT/tokens.json: a text and the tokenizer's ids, and
                                 OUT/spm.gguf with a `llama` (SentencePiece) vocabulary and its ids in
                                 OUT/tokens-spm.json.
  gguf_reference.py seeds OUT    the seed inputs of the fuzz target gguf (tests/fuzz/corpus/gguf/seed-*).
"""
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

QK_K = 256
QUANTIZABLE = [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1]
# The K-quants gguf-py 0.10 only dequantizes: byte offsets of their fp16 scales in a block.
K_QUANT_SCALES = {Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208]}


def random_floats(rng, shape):
    x = rng.standard_normal(shape).astype(np.float32) * np.float32(0.5)
    flat = x.reshape(-1)
    flat[:4] = [0.0, -0.0, 1e-6, -3e-7]  # zeros and fp16 subnormals
    flat[4] = 60000.0
    return x


def random_k_blocks(rng, qtype, shape):
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    rows, cols = int(np.prod(shape[:-1])), shape[-1]
    n_blocks = rows * cols // block
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for off in K_QUANT_SCALES[qtype]:
        scale = (rng.standard_normal(n_blocks) * 0.01).astype(np.float16)
        raw[:, off:off + 2] = scale.view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(*shape[:-1], cols // block * size)


def tensor_encode(rng, qtype, shape):
    if qtype in K_QUANT_SCALES:
        return random_k_blocks(rng, qtype, shape)
    return gguf.quants.quantize(random_floats(rng, shape), qtype)


def write_quants(out):
    rng = np.random.default_rng(22)
    for qtype in QUANTIZABLE + list(K_QUANT_SCALES):
        path = os.path.join(out, qtype.name + ".gguf")
        w = gguf.GGUFWriter(path, "agoq-test")
        if qtype == Q.Q4_K:
            w.add_custom_alignment(64)
        for name, shape in (("a", (4, 512)), ("b", (2, 3, 256))):
            data = tensor_encode(rng, qtype, shape)
            raw_dtype = qtype if data.dtype == np.uint8 else None
            w.add_tensor(name, data, raw_dtype=raw_dtype)
        write_all(w)
        reader = gguf.GGUFReader(path)
        values = [gguf.quants.dequantize(t.data, t.tensor_type).astype("<f4").reshape(-1) for t in reader.tensors]
        np.concatenate(values).tofile(os.path.join(out, qtype.name + ".f32"))
    write_meta(os.path.join(out, "meta.gguf"))


def write_meta(path):
    w = gguf.GGUFWriter(path, "agoq-test")
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 0.1)
    w.add_uint64("t.u64", 1 << 60)
    w.add_int64("t.i64", -(1 << 60))
    w.add_float64("t.f64", 0.1)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo")
    w.add_array("t.ints", [1, -2, 3])
    w.add_array("t.floats", [0.5, -1.25])
    w.add_array("t.strs", ["a", "", "ccc"])
    w.add_array("t.nested", [[1, 2], [3], ["x"]])
    w.add_tensor("z", np.arange(6, dtype=np.float32).reshape(2, 3))
    write_all(w)


def write_all(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ---- model ----

def tokenizer_make(text):
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([text], trainer)
    return tok


def tokenizer_fields(tok):
    """tokens by id, merges as "a b", token types (special tokens are CONTROL), as convert_hf_to_gguf writes them."""
    model = json.loads(tok.to_str())["model"]
    vocab = tok.get_vocab()
    tokens = [None] * len(vocab)
    for piece, i in vocab.items():
        tokens[i] = piece
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    special = {t.content for t in tok.get_added_tokens_decoder().values() if t.special}
    types = [gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in tokens]
    return tokens, merges, types


def rope_permute(w, n_head):
    # llama.cpp's converter: each head's rows (2, hd/2) -> (hd/2, 2), so rotary pairs are adjacent rows
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


GGUF_NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
              "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
              "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def gguf_tensors(state, cfg):
    """(gguf name, fp32 array) in llama.cpp's names and row order."""
    out = []
    for name, t in state.items():
        a = t.detach().numpy().astype(np.float32)
        if name == "model.embed_tokens.weight":
            out.append(("token_embd.weight", a))
        elif name == "model.norm.weight":
            out.append(("output_norm.weight", a))
        elif name == "lm_head.weight":
            if not cfg.tie_word_embeddings:
                out.append(("output.weight", a))
        else:
            parts = name.split(".")  # model.layers.N.<module>.<sub>.weight
            module = ".".join(parts[3:-1])
            if module == "self_attn.q_proj":
                a = rope_permute(a, cfg.num_attention_heads)
            elif module == "self_attn.k_proj":
                a = rope_permute(a, cfg.num_key_value_heads)
            out.append((f"blk.{parts[2]}.{GGUF_NAMES[module]}.{parts[-1]}", a))
    return out


def gguf_model_write(path, cfg, tensors, tok_fields, ftype, arch="llama", extra=None):
    tokens, merges, types = tok_fields
    w = gguf.GGUFWriter(path, arch)
    w.add_name("agoq test model")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(cfg.rope_theta)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    w.add_file_type(gguf.LlamaFileType.ALL_F32 if ftype == "F32" else gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index("<|endoftext|>"))
    w.add_eos_token_id(tokens.index("<|endoftext|>"))
    w.add_add_bos_token(False)
    for name, a in tensors:
        if isinstance(a, tuple):  # (raw bytes, type)
            w.add_tensor(name, a[0], raw_dtype=a[1])
        else:  # as the converter: 1-D tensors stay F32
            w.add_tensor(name, a.astype(np.float16) if ftype == "F16" and a.ndim > 1 else a)
    if extra:
        extra(w)
    write_all(w)


def model_make(out, tied, text):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    tok = tokenizer_make(text)
    torch.manual_seed(7 if tied else 8)
    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, rope_theta=500000.0,
                      rms_norm_eps=1e-5, tie_word_embeddings=tied, torch_dtype="float32",
                      bos_token_id=tok.token_to_id("<|endoftext|>"), eos_token_id=tok.token_to_id("<|endoftext|>"))
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # norms away from 1, so a swapped norm shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    hf = os.path.join(out, "hf_tied" if tied else "hf")
    model.save_pretrained(hf, safe_serialization=True)
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>").save_pretrained(hf)
    return cfg, gguf_tensors(model.state_dict(), cfg), tokenizer_fields(tok), tok


def rope_unpermute(w, n_head):
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def q8_write(out, cfg, tensors, fields):
    """untied-Q8_0.gguf (2-D tensors in Q8_0) and, in untied-Q8_0.safetensors under HF names, gguf-py's
    dequantization of each turned back to HF row order here (an inverse of the converter's permutation of its own)."""
    from safetensors.numpy import save_file
    hf_names = {v: k for k, v in GGUF_NAMES.items()}
    qtensors, expect = [], {}
    for name, a in tensors:
        if a.ndim == 1:
            qtensors.append((name, a))
            deq = a
        else:
            raw = gguf.quants.quantize(a, Q.Q8_0)
            qtensors.append((name, (raw, Q.Q8_0)))
            deq = gguf.quants.dequantize(raw, Q.Q8_0)
        if name.endswith("attn_q.weight"):
            deq = rope_unpermute(deq, cfg.num_attention_heads)
        elif name.endswith("attn_k.weight"):
            deq = rope_unpermute(deq, cfg.num_key_value_heads)
        if name.startswith("blk."):
            _, layer, short, _ = name.split(".")
            hf = f"model.layers.{layer}.{hf_names[short]}.weight"
        else:
            hf = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                  "output.weight": "lm_head.weight"}[name]
        expect[hf] = np.ascontiguousarray(deq, dtype=np.float32)
    gguf_model_write(os.path.join(out, "untied-Q8_0.gguf"), cfg, qtensors, fields, "F32")
    save_file(expect, os.path.join(out, "untied-Q8_0.safetensors"))


def bad_variants(out, cfg, tensors, fields):
    def drop(name):
        return [(n, a) for n, a in tensors if n != name]

    def reshaped(name):
        return [(n, a[:-2] if n == name else a) for n, a in tensors]

    def retyped(name):
        return [(n, a.astype(np.float64) if n == name else a) for n, a in tensors]

    d = cfg.hidden_size
    variants = {
        "arch": (tensors, "qwen2", None),
        "missing": (drop("blk.1.ffn_up.weight"), "llama", None),
        "shape": (reshaped("blk.0.attn_k.weight"), "llama", None),
        "type": (retyped("blk.0.ffn_norm.weight"), "llama", None),
        "bias": (tensors + [("blk.0.attn_q.bias", np.zeros(d, np.float32))], "llama", None),
        "rope_freqs": (tensors + [("rope_freqs.weight", np.ones(d // cfg.num_attention_heads // 2, np.float32))],
                       "llama", None),
        "rope_scaling": (tensors, "llama", lambda w: (w.add_rope_scaling_type(gguf.RopeScalingType.YARN),
                                                      w.add_rope_scaling_factor(4.0))),
        "rope_dim": (tensors, "llama", lambda w: w.add_uint32("llama.attention.key_length", 8)),
        "tokenizer": (tensors, "llama", None),
    }
    for what, (ts, arch, extra) in variants.items():
        gguf_model_write(os.path.join(out, f"bad-{what}.gguf"), cfg, ts, fields, "F32", arch, extra)


def spm_write(out, cfg, tensors):
    """spm.gguf: a `llama` (SentencePiece) vocabulary as convert_hf_to_gguf writes one (pieces, scores, token types
    from the model), over the tied model's tensors; tokens-spm.json: a text and sentencepiece's ids for it."""
    import sentencepiece as spm
    prefix = os.path.join(out, "spm")
    spm.SentencePieceTrainer.train(sentence_iterator=iter((TEXT * 4).splitlines()), model_prefix=prefix,
                                   vocab_size=300, model_type="bpe", byte_fallback=True, num_threads=1,
                                   normalization_rule_name="identity", remove_extra_whitespaces=False,
                                   minloglevel=2)  # as Llama 2's tokenizer.model: GGUF keeps no normalizer
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    n = sp.get_piece_size()
    tokens = [sp.id_to_piece(i) for i in range(n)]
    scores = [sp.get_score(i) for i in range(n)]
    types = [gguf.TokenType.UNKNOWN if sp.is_unknown(i) else gguf.TokenType.CONTROL if sp.is_control(i) else
             gguf.TokenType.UNUSED if sp.is_unused(i) else gguf.TokenType.BYTE if sp.is_byte(i) else
             gguf.TokenType.NORMAL for i in range(n)]
    w = gguf.GGUFWriter(os.path.join(out, "spm.gguf"), "llama")
    for key, v in (("context_length", cfg.max_position_embeddings), ("embedding_length", cfg.hidden_size),
                   ("block_count", cfg.num_hidden_layers), ("feed_forward_length", cfg.intermediate_size),
                   ("attention.head_count", cfg.num_attention_heads),
                   ("attention.head_count_kv", cfg.num_key_value_heads), ("vocab_size", cfg.vocab_size)):
        w.add_uint32("llama." + key, v)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    for name, a in tensors:
        w.add_tensor(name, a)
    write_all(w)
    sample = TEXT + "  Mr. Bennet's   café, 2024! \U0001F600\n"
    with open(os.path.join(out, "tokens-spm.json"), "w") as f:
        json.dump({"text": sample, "ids": sp.encode(sample), "bos": sp.bos_id()}, f)


TEXT = ("It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want "
        "of a wife.\n  However little known the feelings or views of such a man may be on his first entering a "
        "neighbourhood, this truth is so well fixed in the minds of the surrounding families, that he is considered "
        "the rightful property of some one or other of their daughters. 1234567 <|endoftext|> done.\n")


def write_model(out):
    for tied in (False, True):
        cfg, tensors, fields, tok = model_make(out, tied, TEXT * 4)
        stem = "tied" if tied else "untied"
        for ftype in ("F32", "F16"):
            gguf_model_write(os.path.join(out, f"{stem}-{ftype}.gguf"), cfg, tensors, fields, ftype)
        if not tied:
            q8_write(out, cfg, tensors, fields)
            bad_variants(out, cfg, tensors, fields)
            sample = TEXT + "  Mr. Bennet's   café, 2024!\n\n"
            with open(os.path.join(out, "tokens.json"), "w") as f:
                json.dump({"text": sample, "ids": tok.encode(sample).ids}, f)
    spm_write(out, cfg, tensors)
    # a tokenizer agoq does not read: rewrite the model string of bad-tokenizer.gguf in place
    path = os.path.join(out, "bad-tokenizer.gguf")
    data = bytearray(open(path, "rb").read())
    key = b"tokenizer.ggml.model"
    at = data.index(key) + len(key) + 4 + 8
    assert data[at:at + 4] == b"gpt2"
    data[at:at + 4] = b"bert"
    open(path, "wb").write(bytes(data))


# ---- fuzz seeds ----

def write_seeds(out):
    """tests/fuzz/corpus/gguf/seed-*: tiny GGUFs that reach every part of the reader (a 1-layer llama in Q8_0 with a
    gpt2 or a llama tokenizer, F16 and tied, every value type, a K-quant, version 2, general.alignment, a tensor count
    one short)."""
    rng = np.random.default_rng(5)
    c = dict(dim=32, heads=2, kv=1, ffn=32, vocab=8)
    hd = c["dim"] // c["heads"]
    shapes = {"token_embd.weight": (c["vocab"], c["dim"]), "output_norm.weight": (c["dim"],),
              "blk.0.attn_norm.weight": (c["dim"],), "blk.0.ffn_norm.weight": (c["dim"],),
              "blk.0.attn_q.weight": (c["dim"], c["dim"]), "blk.0.attn_k.weight": (c["kv"] * hd, c["dim"]),
              "blk.0.attn_v.weight": (c["kv"] * hd, c["dim"]), "blk.0.attn_output.weight": (c["dim"], c["dim"]),
              "blk.0.ffn_gate.weight": (c["ffn"], c["dim"]), "blk.0.ffn_up.weight": (c["ffn"], c["dim"]),
              "blk.0.ffn_down.weight": (c["dim"], c["ffn"])}

    def seed(name, tokenizer="gpt2", qtype=Q.Q8_0, tied=True):
        w = gguf.GGUFWriter(os.path.join(out, "seed-" + name), "llama")
        w.add_context_length(16)
        w.add_embedding_length(c["dim"])
        w.add_block_count(1)
        w.add_feed_forward_length(c["ffn"])
        w.add_rope_dimension_count(hd)
        w.add_head_count(c["heads"])
        w.add_head_count_kv(c["kv"])
        w.add_rope_freq_base(10000.0)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_tokenizer_model(tokenizer)
        w.add_token_list(["<s>", "a", "b", "ab", "\u0120", "\u0120a", "<|e|>", "x"])
        w.add_token_types([3, 1, 1, 1, 1, 1, 3, 4])
        if tokenizer == "gpt2":
            w.add_tokenizer_pre("gpt-2")
            w.add_token_merges(["a b", "\u0120 a"])
        else:
            w.add_token_scores([0.0, -1.0, -2.0, -0.5, -3.0, -1.5, 0.0, -4.0])
        w.add_bos_token_id(0)
        w.add_eos_token_id(6)
        w.add_add_bos_token(True)
        items = list(shapes.items()) + ([] if tied else [("output.weight", shapes["token_embd.weight"])])
        for tname, shape in items:
            x = random_floats(rng, shape)
            if len(shape) == 1:
                w.add_tensor(tname, x)
            elif qtype == Q.F16:
                w.add_tensor(tname, x.astype(np.float16))
            else:
                w.add_tensor(tname, gguf.quants.quantize(x, qtype), raw_dtype=qtype)
        write_all(w)

    seed("llama-q8-gpt2")
    seed("llama-q8-spm", tokenizer="llama")
    seed("llama-f16-untied", qtype=Q.F16, tied=False)
    seed("llama-q4_0", qtype=Q.Q4_0)
    write_meta(os.path.join(out, "seed-meta"))
    for qtype in (Q.Q4_K, Q.Q6_K):
        w = gguf.GGUFWriter(os.path.join(out, "seed-" + qtype.name.lower()), "agoq-test")
        w.add_custom_alignment(64)
        w.add_tensor("a", random_k_blocks(rng, qtype, (1, 256)), raw_dtype=qtype)
        write_all(w)
    data = bytearray(open(os.path.join(out, "seed-llama-q8-gpt2"), "rb").read())
    data[4] = 2
    open(os.path.join(out, "seed-version2"), "wb").write(bytes(data))
    # a header whose tensor count leaves out the last tensor (output.weight): issue 42 read it as a tied model
    data = bytearray(open(os.path.join(out, "seed-llama-f16-untied"), "rb").read())
    data[8] -= 1
    open(os.path.join(out, "seed-tensor-count-short"), "wb").write(bytes(data))


if __name__ == "__main__":
    mode, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    {"quants": write_quants, "model": write_model, "seeds": write_seeds}[mode](out)
    print("ok", mode, out)
