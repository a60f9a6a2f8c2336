#!/usr/bin/python3
"""Plain PyTorch LLaMA reference for checking agoq's loss and gradients.

    llama_reference.py CKPT_DIR BATCH_SAFETENSORS GRADS_SAFETENSORS [--tol 1e-4] [--hf]
    llama_reference.py --self-test [--ckpt CKPT_DIR]

CKPT_DIR is an agoq checkpoint (config.json + model.safetensors, Hugging Face names). The batch file holds
`inputs` and `targets` (I32 [B, T]; a target -1 is ignored: PyTorch's ignore_index) and optionally `doc_start`
(I32 [B, T]: each row's document start, so attention is block-diagonal causal: packed examples); the grads file
holds agoq's `loss` (F32 [1]) and one gradient per parameter
under the parameter's HF name. The model is rebuilt in float64, the mean cross-entropy over the counted tokens and its
gradients are recomputed, and for the loss and every parameter the relative error |a - r| / |r| (L2 norms) is
printed; the last line is `max_rel_err=<value>`. Exit status 0 when every error is <= --tol, 1 otherwise (missing,
extra or misshapen gradients count as failures), 2 on bad input.

--self-test needs no agoq build: it writes random tiny checkpoints (or uses --ckpt DIR instead), takes gradients computed in
float32 by this same model as "agoq's", and checks that the comparison passes them and catches perturbed ones; it
also checks causality, the RoPE relative-position property and the GQA head mapping. Needs only torch (tested with
Debian's torch 1.13); with transformers importable, --hf (and the self-test) also compare the logits with
transformers' LlamaForCausalLM.
"""
import argparse
import json
import math
import os
import shutil
import struct
import sys
import tempfile

import torch
import torch.nn.functional as F
from torch import nn

# ---------------------------------------------------------------- safetensors

DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool}
NAMES = {v: k for k, v in DTYPES.items()}


class InputError(Exception):
    pass


def safetensors_read(path):
    """-> ({name: tensor}, {metadata}); validates the header the way agoq's reader does."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise InputError(f"{path}: {e.strerror}")
    if len(raw) < 8:
        raise InputError(f"{path}: too short for a safetensors header")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        raise InputError(f"{path}: header length {n} exceeds the file size {len(raw)}")
    try:
        header = json.loads(raw[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{path}: bad JSON header: {e}")
    data = memoryview(raw)[8 + n:]
    meta = header.pop("__metadata__", {}) or {}
    out, covered = {}, 0
    for name, e in header.items():
        dtype = DTYPES.get(e.get("dtype"))
        if dtype is None:
            raise InputError(f"{path}: tensor '{name}' has unsupported dtype {e.get('dtype')!r}")
        shape, (begin, end) = list(e["shape"]), e["data_offsets"]
        numel = math.prod(shape)
        if not 0 <= begin <= end <= len(data) or end - begin != numel * torch.tensor([], dtype=dtype).element_size():
            raise InputError(f"{path}: tensor '{name}' has bad data_offsets [{begin}, {end}] for {shape}")
        covered += end - begin
        if numel == 0:
            out[name] = torch.empty(shape, dtype=dtype)
        else:  # bytearray: a writable copy, so torch does not warn about read-only buffers
            out[name] = torch.frombuffer(bytearray(data[begin:end]), dtype=dtype).reshape(shape)
    if covered != len(data):
        raise InputError(f"{path}: tensors cover {covered} of {len(data)} data bytes")
    return out, meta


def safetensors_write(path, tensors, metadata=None):
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        b = t.numpy().tobytes() if t.dtype != torch.bfloat16 else t.view(torch.int16).numpy().tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


# ---------------------------------------------------------------- model (Hugging Face names and conventions)

class Config:
    def __init__(self, j):
        missing = [k for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                               "vocab_size", "rms_norm_eps") if k not in j]
        if missing:
            raise InputError(f"config.json lacks {', '.join(missing)}")
        self.dim, self.ffn_dim = j["hidden_size"], j["intermediate_size"]
        self.n_layers, self.n_heads = j["num_hidden_layers"], j["num_attention_heads"]
        self.n_kv_heads = j.get("num_key_value_heads") or self.n_heads
        self.vocab_size, self.eps = j["vocab_size"], float(j["rms_norm_eps"])
        self.rope_theta = float(j.get("rope_theta", 10000.0))
        self.tie = bool(j.get("tie_word_embeddings", False))
        self.max_seq_len = j.get("max_position_embeddings", 1 << 30)
        self.head_dim = self.dim // self.n_heads
        if j.get("head_dim") not in (None, self.head_dim) or j.get("rope_scaling") or j.get("attention_bias") \
                or j.get("mlp_bias") or j.get("hidden_act", "silu") != "silu":
            raise InputError("config.json uses features this reference does not implement")


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_cos_sin(T, head_dim, theta, dtype):
    # HF convention: frequency i pairs dimension i with i + head_dim/2 of each head (rotate_half), not (2i, 2i+1).
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def rope_apply(x, cos, sin):  # x: [B, H, T, hd]
    return x * cos + rotate_half(x) * sin


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        kv = c.n_kv_heads * c.head_dim
        self.q_proj = nn.Linear(c.dim, c.dim, bias=False)
        self.k_proj = nn.Linear(c.dim, kv, bias=False)
        self.v_proj = nn.Linear(c.dim, kv, bias=False)
        self.o_proj = nn.Linear(c.dim, c.dim, bias=False)

    def forward(self, x, cos, sin, doc_start=None):
        c, (B, T, _) = self.c, x.shape
        q = self.q_proj(x).view(B, T, c.n_heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)
        q, k = rope_apply(q, cos, sin), rope_apply(k, cos, sin)
        rep = c.n_heads // c.n_kv_heads  # query head h reads kv head h // rep (HF's repeat_kv)
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(c.head_dim)
        masked = torch.ones(T, T, dtype=torch.bool).triu(1)  # [T, T]: key after query
        if doc_start is not None:  # [B, 1, T, T]: or key before the query's document (block-diagonal)
            keys = torch.arange(T).view(1, 1, T)
            masked = (masked.view(1, T, T) | (keys < doc_start.view(B, T, 1))).view(B, 1, T, T)
        p = scores.masked_fill(masked, float("-inf")).softmax(dim=-1)
        return self.o_proj((p @ v).transpose(1, 2).reshape(B, T, c.dim))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c.dim, c.ffn_dim, bias=False)
        self.up_proj = nn.Linear(c.dim, c.ffn_dim, bias=False)
        self.down_proj = nn.Linear(c.ffn_dim, c.dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c.dim, c.eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.dim, c.eps)
        self.mlp = MLP(c)

    def forward(self, x, cos, sin, doc_start=None):
        h = x + self.self_attn(self.input_layernorm(x), cos, sin, doc_start)
        return h + self.mlp(self.post_attention_layernorm(h))


class Backbone(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.dim)
        self.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c.n_layers))
        self.norm = RMSNorm(c.dim, c.eps)


class LlamaForCausalLM(nn.Module):
    """named_parameters() are exactly the HF names; a tied head reuses model.embed_tokens.weight."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        self.model = Backbone(c)
        if not c.tie:
            self.lm_head = nn.Linear(c.dim, c.vocab_size, bias=False)

    def logits(self, inputs, doc_start=None):
        x = self.model.embed_tokens(inputs)
        cos, sin = rope_cos_sin(inputs.shape[1], self.c.head_dim, self.c.rope_theta, x.dtype)
        for layer in self.model.layers:
            x = layer(x, cos, sin, doc_start)
        x = self.model.norm(x)
        return x @ (self.model.embed_tokens.weight if self.c.tie else self.lm_head.weight).t()

    def loss(self, inputs, targets, doc_start=None):  # mean over the counted tokens (targets >= 0)
        logits = self.logits(inputs, doc_start)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-1)


def model_load(ckpt_dir, dtype=torch.float64):
    try:
        with open(os.path.join(ckpt_dir, "config.json")) as f:
            c = Config(json.load(f))
    except (OSError, json.JSONDecodeError) as e:
        raise InputError(f"{ckpt_dir}/config.json: {e}")
    weights, _ = safetensors_read(os.path.join(ckpt_dir, "model.safetensors"))
    m = LlamaForCausalLM(c)
    expected = dict(m.named_parameters())
    missing, extra = sorted(set(expected) - set(weights)), sorted(set(weights) - set(expected))
    if missing or extra:
        raise InputError(f"model.safetensors: missing {missing}, unexpected {extra}")
    for name, p in expected.items():
        if list(weights[name].shape) != list(p.shape):
            raise InputError(f"model.safetensors: {name} is {list(weights[name].shape)}, expected {list(p.shape)}")
    m.load_state_dict({k: v.to(torch.float32) for k, v in weights.items()}, strict=True)
    return m.to(dtype)


def batch_load(path, c):
    t, _ = safetensors_read(path)
    if "inputs" not in t or "targets" not in t:
        raise InputError(f"{path}: needs tensors 'inputs' and 'targets'")
    inputs, targets = t["inputs"].long(), t["targets"].long()
    doc_start = t["doc_start"].long() if "doc_start" in t else None
    if inputs.dim() != 2 or inputs.shape != targets.shape:
        raise InputError(f"{path}: inputs {list(inputs.shape)} and targets {list(targets.shape)} must be equal [B, T]")
    if doc_start is not None and doc_start.shape != inputs.shape:
        raise InputError(f"{path}: doc_start {list(doc_start.shape)} must be [B, T] like inputs")
    for name, x, low in (("inputs", inputs, 0), ("targets", targets, -1)):
        if x.numel() and (x.min() < low or x.max() >= c.vocab_size):
            raise InputError(f"{path}: {name} has ids outside [{low}, {c.vocab_size})")
    if inputs.shape[1] > c.max_seq_len:
        raise InputError(f"{path}: T = {inputs.shape[1]} exceeds max_position_embeddings {c.max_seq_len}")
    return inputs, targets, doc_start


def loss_and_grads(m, inputs, targets, doc_start=None):
    m.zero_grad(set_to_none=True)
    loss = m.loss(inputs, targets, doc_start)
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in m.named_parameters()}


# ---------------------------------------------------------------- comparison

def compare(ckpt_dir, batch_path, grads_path, tol, hf=False, out=sys.stdout):
    """Prints one line per tensor and max_rel_err; returns True when everything is within tol."""
    m = model_load(ckpt_dir)
    inputs, targets, doc_start = batch_load(batch_path, m.c)
    given, _ = safetensors_read(grads_path)
    if "loss" not in given or given["loss"].numel() != 1:
        raise InputError(f"{grads_path}: needs 'loss' with one element")
    loss, grads = loss_and_grads(m, inputs, targets, doc_start)
    if hf:
        hf_check(ckpt_dir, m, inputs, out)
    worst, ok = 0.0, True
    a, r = given["loss"].double().item(), loss.item()
    err = abs(a - r) / max(abs(r), 1e-30)
    worst = max(worst, err)
    print(f"{'loss':<52} agoq={a:.9g} ref={r:.9g} rel_err={err:.3e}", file=out)
    for name, g_ref in grads.items():
        g = given.get(name)
        if g is None or list(g.shape) != list(g_ref.shape) or not g.is_floating_point():
            print(f"{name:<52} FAIL: agoq gradient is {'missing' if g is None else f'{list(g.shape)} {g.dtype}'}"
                  f", expected {list(g_ref.shape)}", file=out)
            ok, worst = False, math.inf
            continue
        ref_norm = g_ref.norm().item()
        diff = (g.double() - g_ref).norm().item()
        err = diff / ref_norm if ref_norm > 0 else diff  # an all-zero reference: compare absolutely
        if not math.isfinite(err):
            err = math.inf
        worst = max(worst, err)
        print(f"{name:<52} {str(list(g_ref.shape)):<12} rel_err={err:.3e} ref_norm={ref_norm:.3e}", file=out)
    for name in sorted(set(given) - set(grads) - {"loss"}):
        print(f"{name:<52} FAIL: not a parameter of this model", file=out)
        ok, worst = False, math.inf
    print(f"max_rel_err={worst:.6e}", file=out)
    return ok and worst <= tol


def hf_check(ckpt_dir, m, inputs, out):
    try:
        import transformers  # noqa: F401 -- optional; not a dependency
    except ImportError:
        print("hf: transformers not importable, cross-check skipped", file=out)
        return
    hfm = transformers.LlamaForCausalLM.from_pretrained(ckpt_dir, torch_dtype=torch.float64)
    with torch.no_grad():
        ref = hfm(input_ids=inputs).logits
        mine = m.logits(inputs)
    err = ((ref - mine).norm() / ref.norm()).item()
    print(f"hf: logits rel_err vs transformers LlamaForCausalLM = {err:.3e}", file=out)
    if not err < 1e-9:
        raise AssertionError("reference disagrees with transformers' LlamaForCausalLM")


# ---------------------------------------------------------------- self-test

def config_json(c):  # what agoq's config_to_hf_json writes (subset)
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": c["dim"],
            "intermediate_size": c["ffn"], "num_hidden_layers": c["layers"], "num_attention_heads": c["heads"],
            "num_key_value_heads": c["kv"], "vocab_size": c["vocab"], "max_position_embeddings": 64,
            "rms_norm_eps": 1e-5, "rope_theta": c["theta"], "tie_word_embeddings": c["tie"], "hidden_act": "silu",
            "torch_dtype": "float32", "attention_bias": False, "mlp_bias": False, "rope_scaling": None}


def checkpoint_write_random(d, spec, gen):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config_json(spec), f, indent=2)
    m = LlamaForCausalLM(Config(config_json(spec)))
    w = {}
    for name, p in m.named_parameters():
        if p.dim() == 1:  # norms near 1 so every layer matters
            w[name] = 1 + 0.2 * torch.randn(p.shape, generator=gen)
        else:
            w[name] = torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1])
    safetensors_write(os.path.join(d, "model.safetensors"), w, {"format": "pt"})


def grads_f32_write(ckpt, batch_path, grads_path):
    m = model_load(ckpt, torch.float32)
    loss, grads = loss_and_grads(m, *batch_load(batch_path, m.c))
    safetensors_write(grads_path, {"loss": loss.reshape(1), **grads})
    return loss, grads


def expect(cond, what):
    print(f"  {'ok  ' if cond else 'FAIL'} {what}")
    if not cond:
        raise AssertionError(what)


def self_test_checkpoint(ckpt, tmp, gen):
    batch, grads = os.path.join(tmp, "batch.safetensors"), os.path.join(tmp, "grads.safetensors")
    c = model_load(ckpt).c
    B, T = 2, min(7, c.max_seq_len)
    inputs = torch.randint(0, c.vocab_size, (B, T), generator=gen, dtype=torch.int32)
    targets = torch.randint(0, c.vocab_size, (B, T), generator=gen, dtype=torch.int32)
    safetensors_write(batch, {"inputs": inputs, "targets": targets})
    loss, g32 = grads_f32_write(ckpt, batch, grads)
    expect(compare(ckpt, batch, grads, 1e-4, hf=True), f"float32 gradients pass at tol 1e-4 (loss {loss.item():.5f})")

    def corrupted(edit, what):
        g = {"loss": loss.reshape(1), **{k: v.clone() for k, v in g32.items()}}
        edit(g)
        safetensors_write(grads, g)
        with open(os.devnull, "w") as devnull:
            expect(not compare(ckpt, batch, grads, 1e-4, out=devnull), what)

    last = list(g32)[-1]
    corrupted(lambda g: g[last].mul_(1.001), f"a gradient off by 0.1% ({last}) fails")
    corrupted(lambda g: g["loss"].add_(1e-3), "a loss off by 1e-3 fails")
    corrupted(lambda g: g.pop("model.norm.weight"), "a missing gradient fails")
    corrupted(lambda g: g.__setitem__("lm_head.bias", torch.zeros(3)), "an extra gradient fails")
    corrupted(lambda g: g.__setitem__(last, g[last].reshape(-1)), "a misshapen gradient fails")


def self_test_properties(gen):
    spec = dict(vocab=13, dim=16, ffn=24, layers=2, heads=4, kv=2, theta=10000.0, tie=False)
    m = LlamaForCausalLM(Config(config_json(spec))).double()
    x = torch.randint(0, 13, (1, 6), generator=gen)
    x2 = x.clone()
    x2[0, -1] = (x[0, -1] + 1) % 13
    with torch.no_grad():
        expect(torch.equal(m.logits(x)[:, :-1], m.logits(x2)[:, :-1]), "causal: a later token leaves earlier logits")
        # RoPE: <rope(q, i), rope(k, j)> depends only on i - j.
        cos, sin = rope_cos_sin(12, 8, 10000.0, torch.float64)
        q, k = torch.randn(8, generator=gen, dtype=torch.float64), torch.randn(8, generator=gen, dtype=torch.float64)
        dots = [(rope_apply(q, cos[i], sin[i]) @ rope_apply(k, cos[i - 3], sin[i - 3])).item() for i in range(3, 12)]
        expect(max(dots) - min(dots) < 1e-12, "rope: scores depend only on relative position")
        # GQA: repeating each kv head's weights rep times gives the equivalent full multi-head model.
        full = LlamaForCausalLM(Config(config_json(dict(spec, kv=4)))).double()
        sd = m.state_dict()
        for k_ in [k_ for k_ in sd if k_.endswith(("k_proj.weight", "v_proj.weight"))]:
            sd[k_] = sd[k_].view(2, 4, 16).repeat_interleave(2, dim=0).reshape(16, 16)
        full.load_state_dict(sd)
        expect(torch.allclose(m.logits(x), full.logits(x), atol=1e-12), "gqa: query head h reads kv head h // rep")
        # Zero head: uniform logits, loss is exactly log(vocab).
        m.lm_head.weight.zero_()
        expect(abs(m.loss(x, x).item() - math.log(13)) < 1e-12, "loss: zero head gives log(vocab)")


def self_test(ckpt=None):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)
    tmp = tempfile.mkdtemp(prefix="llama_ref_selftest_")
    try:
        print("properties:")
        self_test_properties(gen)
        if ckpt:  # only the given checkpoint
            print(f"checkpoint {ckpt}:")
            self_test_checkpoint(ckpt, tmp, gen)
        for spec in () if ckpt else (dict(vocab=37, dim=32, ffn=48, layers=2, heads=4, kv=2, theta=10000.0, tie=False),
                     dict(vocab=29, dim=24, ffn=40, layers=3, heads=3, kv=3, theta=500000.0, tie=True)):
            print(f"random checkpoint {spec}:")
            d = os.path.join(tmp, "ckpt")
            checkpoint_write_random(d, spec, gen)
            self_test_checkpoint(d, tmp, gen)
            shutil.rmtree(d)
        print("self-test passed")
        return True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ckpt_dir", nargs="?")
    ap.add_argument("batch", nargs="?")
    ap.add_argument("grads", nargs="?")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--hf", action="store_true", help="also compare logits with transformers, if importable")
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--ckpt", help="with --self-test: use this checkpoint (e.g. one agoq wrote) instead of random ones")
    a = ap.parse_args()
    try:
        if a.self_test:
            return 0 if self_test(a.ckpt) else 1
        if not (a.ckpt_dir and a.batch and a.grads):
            ap.error("CKPT_DIR BATCH_SAFETENSORS GRADS_SAFETENSORS are required (or --self-test)")
        return 0 if compare(a.ckpt_dir, a.batch, a.grads, a.tol, a.hf) else 1
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except AssertionError as e:
        print(f"self-test failed: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
