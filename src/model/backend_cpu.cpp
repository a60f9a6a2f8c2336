// The CPU backend: model/ops.h on host memory, through the global tracker; every op of the table forwarded.
#include <cstring>

#include "model/act_store.h"
#include "model/attention.h"
#include "model/backend.h"
#include "model/ops.h"

namespace agoq {

namespace {

class CpuBackend final : public ModelBackend {
 public:
  MemDevice device() const override { return MemDevice::host; }
  std::shared_ptr<void> allocate(size_t bytes, MemCategory cat, std::string_view tag) override {
    void* p = MemoryTracker::global().allocate(bytes, cat, tag);
    std::memset(p, 0, bytes);
    return std::shared_ptr<void>(p, [](void* q) { MemoryTracker::global().release(q); });
  }
  void upload(void* dst, const void* host, size_t bytes) override {
    if (bytes && dst != host) std::memcpy(dst, host, bytes);
  }
  void download(void* host, const void* src, size_t bytes) override {
    if (bytes && host != src) std::memcpy(host, src, bytes);
  }
  void zero(float* x, size_t n) override { std::memset(x, 0, n * sizeof(float)); }
  std::unique_ptr<ActStoreApi> store_make(const LlamaConfig& cfg, int max_rows, const ActPolicy& policy,
                                          const ModelStage& stage) override {
    return std::make_unique<ActivationStore>(cfg, max_rows, policy, stage);
  }

#define AGOQ_OP_CPU(name, cls, params, args, cost) \
  void name params override { agoq::name args; }
  AGOQ_MODEL_OPS(AGOQ_OP_CPU)
#undef AGOQ_OP_CPU
};

}  // namespace

const char* model_op_name(ModelOp op) {
#define AGOQ_OP_NAME(name, cls, params, args, cost) #name,
  static constexpr const char* kNames[] = {AGOQ_MODEL_OPS(AGOQ_OP_NAME)};
#undef AGOQ_OP_NAME
  return kNames[int(op)];
}

ModelBackend& model_backend_cpu() {
  static CpuBackend cpu;
  return cpu;
}

}  // namespace agoq
