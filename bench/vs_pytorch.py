#!/usr/bin/python3
"""agoq vs PyTorch (eager, fp32, CPU) on the reference training config, measured one after the other:

    /usr/bin/python3 bench/vs_pytorch.py [--bin build/agoq] [--steps 5]

Runs `agoq bench train --json --skip-memory`, then the same model (tests/torch/llama_reference.py, the module the
parity test checks agoq against) for the same number of steps with torch.optim.AdamW, and prints tokens/s and MFU
of both against the sgemm peak agoq measured. Needs Debian's python3-torch.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "torch"))
import llama_reference as ref  # noqa: E402

DIM, LAYERS, HEADS, FFN, VOCAB, SEQ, BATCH = 256, 6, 8, 688, 4096, 256, 8


def torch_tokens_per_s(steps):
    cfg = ref.Config({"hidden_size": DIM, "intermediate_size": FFN, "num_hidden_layers": LAYERS,
                      "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "vocab_size": VOCAB,
                      "rms_norm_eps": 1e-5, "rope_theta": 10000.0})
    model = ref.LlamaForCausalLM(cfg).float()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, VOCAB, (BATCH, SEQ))
    y = torch.randint(0, VOCAB, (BATCH, SEQ))

    def step():
        opt.zero_grad(set_to_none=True)
        model.loss(x, y).backward()
        opt.step()

    for _ in range(2):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return BATCH * SEQ * steps / (time.perf_counter() - t0)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default="build/agoq")
    p.add_argument("--steps", type=int, default=5)
    args = p.parse_args()
    out = subprocess.run([args.bin, "bench", "train", "--json", "--skip-memory", "--steps", str(args.steps)],
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    a = json.loads(out)
    flops_per_token = a["model_gflops"] * 1e9 / a["tokens_per_s"]
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", os.cpu_count())))
    t = torch_tokens_per_s(args.steps)
    t_mfu = t * flops_per_token / (a["sgemm_gflops"] * 1e9)
    print(f"reference config: dim {DIM}, {LAYERS} layers, {HEADS} heads, ffn {FFN}, vocab {VOCAB}, seq {SEQ}, "
          f"batch {BATCH}, fp32; sgemm peak {a['sgemm_gflops']:.1f} GFLOP/s")
    print(f"{'':18}{'tokens/s':>12}{'MFU':>10}")
    print(f"{'agoq':18}{a['tokens_per_s']:12.0f}{100 * a['mfu']:9.1f}%")
    print(f"{'PyTorch ' + torch.__version__:18}{t:12.0f}{100 * t_mfu:9.1f}%")
    print(f"agoq / PyTorch: {a['tokens_per_s'] / t:.2f}x")


if __name__ == "__main__":
    main()
