#!/usr/bin/env bash
# The one-command GPU check (docs/cuda.md). On a machine with an NVIDIA GPU, CMake, ninja and nvcc, and nothing
# agoq-specific: builds the GPU-only configuration (core, quant, cuda, their tests and the device benchmarks; with an
# OpenBLAS -- packed by scripts/gpu-deps.sh -- also the GPU model, its tests and bench train|act|ops; no Open MPI or
# SentencePiece needed) with all cores, runs `ctest -L gpu` and the CPU-side tests of the
# shared math, one GPU test under compute-sanitizer, the device benchmarks with --json, and PyTorch's bf16 reference
# of the 1B-class model when PyTorch with CUDA is there. Everything goes under OUT.
#   Usage: scripts/gpu-check.sh OUT [--deps DIR]
# --deps DIR: GoogleTest, CLI11, nlohmann-json and OpenBLAS packed by scripts/gpu-deps.sh on a Debian machine, for a GPU
# machine that lacks them. CUDA libraries: the toolkit's, or those of the Python environment's nvidia-* wheels
# (found below and put on LD_LIBRARY_PATH).
set -euo pipefail
out=${1:?usage: scripts/gpu-check.sh OUT [--deps DIR]}
deps=""
[ "${2:-}" = "--deps" ] && deps=$(cd "${3:?--deps needs a folder}" && pwd)
cd "$(dirname "$0")/.."
mkdir -p "$out"
out=$(cd "$out" && pwd)
start=$(date +%s)
log() { echo "gpu-check: $* ($(( $(date +%s) - start )) s)" | tee -a "$out/summary.txt"; }

nvcc=$(command -v nvcc || true)
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
[ -n "$nvcc" ] || { echo "gpu-check: no nvcc on PATH or in /usr/local/cuda"; exit 1; }
# The Python environment's CUDA libraries (nvidia-cublas, nvidia-cuda-runtime, ... wheels), when the system has none.
pylibs=$(python3 - 2>/dev/null <<'PY' || true
import glob, os
try:
    import nvidia
    roots = list(nvidia.__path__)
except ImportError:
    roots = []
print(":".join(sorted({os.path.dirname(p) for r in roots for p in glob.glob(os.path.join(r, "*", "lib", "*.so*"))})))
PY
)
[ -n "$pylibs" ] && export LD_LIBRARY_PATH="$pylibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || true
log "nvcc $("$nvcc" --version | tail -1)"

cmake_args=(-S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DAGOQ_GPU_ONLY=ON -DCMAKE_CUDA_COMPILER="$nvcc")
[ -n "$deps" ] && cmake_args+=(-DCMAKE_PREFIX_PATH="$deps")
cmake "${cmake_args[@]}" > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
ninja -C build-gpu -j"$(nproc)" > "$out/build.log" 2>&1 || { grep -m20 -B2 -A8 'error' "$out/build.log"; exit 1; }
log "built"

status=0
(cd build-gpu && ctest -L gpu --output-on-failure --timeout 300 -j4) > "$out/ctest-gpu.log" 2>&1 || status=1
grep -E 'tests passed|Skipped|Failed|Not Run' "$out/ctest-gpu.log" | tee -a "$out/summary.txt" || true
(cd build-gpu && OMP_NUM_THREADS=4 ctest -LE gpu --output-on-failure --timeout 300 -j4) > "$out/ctest-cpu.log" 2>&1 ||
  status=1
grep -E 'tests passed' "$out/ctest-cpu.log" | sed 's/^/cpu-side: /' | tee -a "$out/summary.txt" || true
log "tests (status $status)"

if command -v compute-sanitizer >/dev/null; then
  compute-sanitizer --error-exitcode 9 build-gpu/test_cuda \
    --gtest_filter='CudaQuant.*:CudaGradQ8.Allreduce*:CudaOps.*:CudaAttention.*' \
    > "$out/compute-sanitizer.log" 2>&1 || status=1
  if [ -x build-gpu/test_cuda_train ]; then
    compute-sanitizer --error-exitcode 9 build-gpu/test_cuda_train --gtest_filter='ModelCuda.Fp32*' \
      > "$out/compute-sanitizer-model.log" 2>&1 || status=1
    tail -3 "$out/compute-sanitizer-model.log" | tee -a "$out/summary.txt"
  fi
  tail -3 "$out/compute-sanitizer.log" | tee -a "$out/summary.txt"
  log "compute-sanitizer"
fi

build-gpu/agoq bench quant --device cuda --mib 256 --reps 9 --json > "$out/bench-quant-cuda.json" 2> "$out/bench-quant-cuda.err" ||
  status=1
build-gpu/agoq bench quant --device cuda --mib 256 --reps 9 > "$out/bench-quant-cuda.txt" 2>&1 || status=1
log "bench quant --device cuda"
# The GPU model's benchmarks, where the build has it (an OpenBLAS: from --deps, or the machine's).
if [ -x build-gpu/test_cuda_train ]; then
  timeout 300 build-gpu/agoq bench train --device cuda --json > "$out/bench-train-cuda.json" 2> "$out/bench-train-cuda.err" ||
    status=1
  log "bench train --device cuda: $(tr -d '\n ' < "$out/bench-train-cuda.json" | head -c 400)"
  timeout 300 build-gpu/agoq bench act --device cuda --steps 3 > "$out/bench-act-cuda.txt" 2>&1 || status=1
  log "bench act --device cuda"
  timeout 300 build-gpu/agoq bench ops --device cuda --json > "$out/bench-ops-cuda.json" 2> "$out/bench-ops-cuda.err" ||
    status=1
  timeout 300 build-gpu/agoq bench ops --device cuda > "$out/bench-ops-cuda.txt" 2>&1 || status=1
  log "bench ops --device cuda"
else
  log "no OpenBLAS for the GPU model: its tests and bench train|act|ops --device cuda not built (scripts/gpu-deps.sh)"
fi

if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  timeout 180 python3 scripts/gpu_torch_reference.py --json > "$out/torch-reference.json" 2> "$out/torch-reference.err" ||
    status=1
  log "PyTorch reference: $(tr -d '\n ' < "$out/torch-reference.json" | head -c 300)"
  # The issue's bar, from the two files: agoq's whole recipe (agoq+q8) against PyTorch bf16 on the same model.
  if [ -s "$out/bench-train-cuda.json" ]; then
    python3 - "$out/bench-train-cuda.json" "$out/torch-reference.json" <<'PY' | tee -a "$out/summary.txt" || true
import json, sys
runs = {r["policy"]: r for r in json.load(open(sys.argv[1]))}
torch = json.load(open(sys.argv[2]))
for name in ("agoq+q8", "agoq"):
    if name in runs:
        r = runs[name]
        print(f"gpu-check: {name} vs PyTorch bf16: {r['tokens_per_s'] / torch['tokens_per_s']:.2f}x tokens/s "
              f"at {r['peak_bytes'] / 2**30 / torch['peak_allocated_gib']:.2f}x peak memory "
              f"(goal: >= 1.0x at <= 0.5x); act bytes {r['act_vs_first']:.2f}x and step {r['step_vs_first']:.2f}x "
              f"the bf16 store's (goals <= 0.40x, <= 1.05x); MFU {100 * r['mfu']:.1f}% (goal >= 45%)")
PY
  fi
fi
log "done, status $status"
exit $status
