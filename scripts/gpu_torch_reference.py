#!/usr/bin/env python3
"""PyTorch's bf16 training step of a LLaMA model on the GPU, the reference agoq's GPU path is measured against
(scripts/gpu-check.sh runs it; docs/cuda.md). bf16 autocast, SDPA causal attention, fp32 master weights, fused
AdamW; prints tokens/s, MFU against the dense bf16 peak and the peak allocated memory.

    python3 scripts/gpu_torch_reference.py [--dim 2048 --layers 16 --seq 2048 --batch 4 --steps 6] [--json]
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F


class RMSNorm(torch.nn.Module):  # (torch.nn.RMSNorm exists only from PyTorch 2.4)
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps).to(x.dtype) * self.weight


class Block(torch.nn.Module):
    def __init__(self, dim, heads, ffn):
        super().__init__()
        self.heads = heads
        self.n1 = RMSNorm(dim)
        self.n2 = RMSNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim, bias=False)
        self.o = torch.nn.Linear(dim, dim, bias=False)
        self.gate_up = torch.nn.Linear(dim, 2 * ffn, bias=False)
        self.down = torch.nn.Linear(ffn, dim, bias=False)

    def forward(self, x, cos, sin):
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.heads, d // self.heads).transpose(1, 3).unbind(2)

        def rope(u):  # HF rotate_half
            u1, u2 = u.chunk(2, dim=-1)
            return u * cos + torch.cat((-u2, u1), dim=-1) * sin

        a = F.scaled_dot_product_attention(rope(q), rope(k), v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        g, u = self.gate_up(self.n2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


class Llama(torch.nn.Module):
    def __init__(self, vocab, dim, layers, heads, ffn, seq):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.blocks = torch.nn.ModuleList(Block(dim, heads, ffn) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.head = torch.nn.Linear(dim, vocab, bias=False)
        hd = dim // heads
        inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.outer(torch.arange(seq).float(), inv)
        ang = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)

    def forward(self, x, y):
        h = self.emb(x)
        for blk in self.blocks:
            h = blk(h, self.cos, self.sin)
        logits = self.head(self.norm(h))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.view(-1))


def main():
    p = argparse.ArgumentParser()
    for name, default in [("dim", 2048), ("layers", 16), ("heads", 16), ("ffn", 5632), ("vocab", 32000),
                          ("seq", 2048), ("batch", 4), ("steps", 6), ("peak_tflops", 989.0)]:
        p.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = Llama(a.vocab, a.dim, a.layers, a.heads, a.ffn, a.seq).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
    y = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, y)
        loss.backward()
        opt.step()
        return loss

    step(), step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / a.steps
    params = sum(q.numel() for q in model.parameters())
    tokens = a.batch * a.seq
    # 6 N per token for the weights, plus attention's 12 L T d per sequence (causal: half of it is work)
    flops = 6 * params * tokens + 6 * a.layers * a.batch * a.seq * a.seq * a.dim
    r = {"framework": f"pytorch {torch.__version__}", "device": torch.cuda.get_device_name(), "params": params,
         "dim": a.dim, "layers": a.layers, "seq": a.seq, "batch": a.batch, "step_ms": dt * 1e3,
         "tokens_per_s": tokens / dt, "mfu": flops / dt / (a.peak_tflops * 1e12),
         "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30, "loss": float(loss)}
    print(json.dumps(r, indent=2) if a.json else
          f"{r['device']}: {r['tokens_per_s']:.0f} tokens/s, MFU {100 * r['mfu']:.1f}%, "
          f"peak {r['peak_allocated_gib']:.2f} GiB ({params / 1e9:.2f} B parameters)")


if __name__ == "__main__":
    main()
