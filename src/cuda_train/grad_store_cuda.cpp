#include "cuda_train/grad_store_cuda.h"

#include <algorithm>

#include "cuda/grad_q8_cuda.h"

namespace agoq {

CudaGradStore::CudaGradStore(ModelBackend& gpu, const LlamaConfig& cfg, const ModelStage& stage, int block,
                             QuantRounding rounding)
    : gpu_(gpu), block_(block), rounding_(rounding), units_(model_grad_units(cfg, stage)) {
  // Untied, the embedding comes last, after every other unit is folded: it shares the scratch, written densely.
  const GradScratchLayout l = model_grad_scratch(cfg, stage, block, /*embed_sparse=*/false, false, 0);
  for (const ParamSegment& u : units_) {
    const size_t n = u.end - u.begin;
    codes_.push_back(gpu.buffer<int8_t>(n, MemCategory::gradients, "grad.q8"));
    scales_.push_back(gpu.buffer<float>(grad_q8_blocks(n, block), MemCategory::gradients, "grad.q8"));
  }
  scratch_ = gpu.buffer<float>(l.shared(), MemCategory::gradients, "grad.scratch");
  if (l.embed_tied) embed_scratch_ = gpu.buffer<float>(l.embed_tied, MemCategory::gradients, "grad.scratch");
}

std::vector<ParamSegment> CudaGradStore::model_storage() {
  std::vector<ParamSegment> out;
  for (int u = 0; u < unit_count(); ++u) out.push_back({units_[u].begin, units_[u].end, scratch(u)});
  return out;
}

void CudaGradStore::unit_ready(int u, bool first, uint64_t seed) {
  GradQ8Options o;
  o.block = block_, o.rounding = rounding_, o.seed = {seed, uint64_t(u)}, o.index_base = 0;
  const size_t n = units_[u].end - units_[u].begin;
  if (first) cuda_grad_q8_quantize(scratch(u), n, codes_[u].data(), scales_[u].data(), o);
  else cuda_grad_q8_accumulate(codes_[u].data(), scales_[u].data(), scratch(u), n, o);
  gpu_.zero(scratch(u), n);
}

float* CudaGradStore::unit_fp32(int u) {
  const size_t n = units_[u].end - units_[u].begin;
  cuda_grad_q8_dequantize(codes_[u].data(), scales_[u].data(), n, scratch(u), block_);
  return scratch(u);
}

void CudaGradStore::unit_release(int u) { gpu_.zero(scratch(u), units_[u].end - units_[u].begin); }

}  // namespace agoq
