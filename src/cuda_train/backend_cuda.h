// The model's ops on the GPU (model/backend.h's CUDA backend): the kernels of cuda/ops_cuda.h, the cuBLASLt GEMMs of
// cuda/matmul_cuda.h, the attention of cuda/attention_cuda.h and the device activation store, on one stream (the
// default one, which orders every call after the previous). Memory is the device tracker's.
//
// Mixed precision, as Megatron does it: with GemmPrecision::bf16 every GEMM reads bf16 copies of its weights and of
// its other input and accumulates in fp32; outputs, weight gradients, the masters and the optimizer stay fp32. The
// copy of a weight is made by the first GEMM that reads it after weights_changed(), which the model calls when it
// writes its weights and the optimizer step after each update. The copies are keyed by the weight's address, so a
// new allocation (which may reuse a freed one's) drops them all. GemmPrecision::fp32 keeps every GEMM in fp32
// (CUBLAS_COMPUTE_32F, never TF32): the CPU model's numbers to rounding, which the tests check.
#pragma once
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>

#include "cuda/attention_cuda.h"
#include "cuda/device_buffer.h"
#include "cuda/matmul_cuda.h"
#include "model/backend.h"

namespace agoq {

class CudaBackend final : public ModelBackend {
 public:
  // Opens the GPU first (cuda_device_open: one error line where none is usable).
  explicit CudaBackend(GemmPrecision precision);
  GemmPrecision gemm_precision() const override { return precision_; }
  // The fp32 weights were updated: the bf16 copies are made again when next read.
  void weights_changed() override { ++weights_version_; }
  void synchronize() override;  // the stream's work

  MemDevice device() const override { return MemDevice::cuda; }
  std::shared_ptr<void> allocate(size_t bytes, MemCategory cat, std::string_view tag) override;
  void upload(void* dst, const void* host, size_t bytes) override;
  void download(void* host, const void* src, size_t bytes) override;
  void zero(float* x, size_t n) override;
  std::unique_ptr<ActStore> store_make(const LlamaConfig& cfg, int max_rows, const ActPolicy& policy,
                                       const ModelStage& stage) override;

  // Every op of the table; the vocabulary shard's cross-entropy (tensor parallelism) is not built on the GPU yet,
  // which supports() says, so the model never calls it here.
  bool supports(ModelOp op) const override;
  AGOQ_MODEL_OPS(AGOQ_OP_DECLARE_OVERRIDE)

 private:
  // bf16 GEMMs: the weight's copy (made again when stale), and an activation converted into scratch `slot`.
  const void* weight_bf16(const float* w, size_t n);
  const void* activation_bf16(const float* x, size_t n, int slot);
  CudaAttention& attention(int B, int T, int H, int Hkv, int hd);  // one per shape, scratch kept

  GemmPrecision precision_;
  CudaMatmul mm_;
  struct WeightCopy {
    DeviceBuffer<uint16_t> bits;
    long version = -1;
  };
  std::unordered_map<const float*, WeightCopy> weights_bf16_;
  long weights_version_ = 0;
  DeviceBuffer<uint16_t> scratch_bf16_[2];  // a GEMM's activation and output gradient, grown as needed
  std::map<std::tuple<int, int, int, int, int>, std::unique_ptr<CudaAttention>> attention_;
};

}  // namespace agoq
