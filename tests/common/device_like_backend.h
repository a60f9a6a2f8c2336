// A backend with the CPU's ops that presents its memory as a device's (MemDevice::cuda's tracker, host_memory()
// false, no vocabulary shards): the model's device paths, and the op table's cases, proven on the CPU.
#pragma once
#include <cstdlib>
#include <cstring>

#include "model/backend.h"

namespace agoq {

class DeviceLikeBackend final : public ModelBackend {
 public:
  size_t uploads = 0, downloads = 0, synchronizes = 0;

  MemDevice device() const override { return MemDevice::cuda; }
  std::shared_ptr<void> allocate(size_t bytes, MemCategory cat, std::string_view tag) override {
    void* p = std::calloc(bytes, 1);
    MemoryTracker::of(MemDevice::cuda).record(p, bytes, cat, tag);
    return std::shared_ptr<void>(p, [](void* q) {
      MemoryTracker::of(MemDevice::cuda).forget(q);
      std::free(q);
    });
  }
  void upload(void* dst, const void* host, size_t bytes) override { std::memcpy(dst, host, bytes), ++uploads; }
  void download(void* host, const void* src, size_t bytes) override { std::memcpy(host, src, bytes), ++downloads; }
  void zero(float* x, size_t n) override { cpu().zero(x, n); }
  void synchronize() override { ++synchronizes; }
  std::unique_ptr<ActStore> store_make(const LlamaConfig& cfg, int max_rows, const ActPolicy& policy,
                                       const ModelStage& stage) override {
    return cpu().store_make(cfg, max_rows, policy, stage);
  }
#define AGOQ_OP_TO_CPU(name, cls, params, args, cost) \
  void name params override { cpu().name args; }
  AGOQ_MODEL_OPS(AGOQ_OP_TO_CPU)
#undef AGOQ_OP_TO_CPU
  // A device: what the host alone does, it does not.
  bool supports(ModelOp op) const override {
    return op != ModelOp::crossentropy_shard_max && op != ModelOp::crossentropy_shard_exp &&
           op != ModelOp::crossentropy_shard_finish;
  }

 private:
  static ModelBackend& cpu() { return model_backend_cpu(); }
};

}  // namespace agoq
