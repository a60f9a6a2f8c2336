// One optimizer step of a model on the GPU, in one process: the CPU step's twin for a single replica
// (parallel/step_cpu.h), in the same five phases (optim/step.h):
//
//   1. step_begin      each micro-batch's seeds (step_act_seed, step_grad_seed) and 1/m scale
//   2. part_done       with the 8-bit store, each finished unit folded into it (train_forward_backward)
//   3. grads_reduce    nothing to reduce: one replica
//   4. norm_and_clip   the norm, then optim/step.h's check and clipping factor
//   5. update          AdamW with fp32 moments, on the device
//
// The update is optim/adamw.h's, value for value (cuda_adamw_step runs adamw_update); the moments are the device
// tracker's (category optimizer). Checkpoints read and write host copies (host tracker, workspace, tag ckpt.host)
// named as CpuStep's views name them (the weights by their HF names; adam.m.<name>, adam.v.<name>), so a
// checkpoint of either device resumes on the other.
#pragma once
#include <memory>
#include <vector>

#include "cuda_train/backend_cuda.h"
#include "cuda_train/grad_store_cuda.h"
#include "model/llama.h"
#include "opmath/adamw_math.h"
#include "optim/adamw.h"
#include "optim/step.h"

namespace agoq {

class CudaStep final : public StepEngine {
 public:
  // model: on `gpu`, writing its gradients into its own fp32 buffer (q8_grads null) or into q8_grads' storage
  // (the store the model was built on, kept here). adam.state must be fp32.
  CudaStep(LlamaModel& model, CudaBackend& gpu, std::unique_ptr<CudaGradStore> q8_grads, const AdamWConfig& adam,
           float clip, uint64_t seed);

  std::vector<MicroBatchRun> step_begin(long step, int m, double loss_tokens = 0) override;
  void part_done(const MicroBatchRun& run, int j, int part) override;
  double grads_reduce() override { return 0; }
  StepNorm norm_and_clip(double loss_sum) override;
  void update(float lr, float clip_scale) override;

  // moments_gather copies the weights and the moments to the host; moments_scatter sends them back (a resume).
  NamedTensors weights_views() override;
  NamedTensors moments_views() override;
  void moments_gather() override;
  void moments_release() override;
  // fp32 moments only (the session decodes a checkpoint's 8-bit moments into these).
  NamedTensors moments_load_views(const MomentsForm& file) override;
  void moments_scatter() override;

 private:
  void host_allocate();

  LlamaModel& model_;
  CudaBackend& gpu_;
  std::unique_ptr<CudaGradStore> q8_;
  AdamWConfig adam_;
  float clip_;
  uint64_t seed_;
  long step_ = 0;
  int m_ = 1;
  double loss_tokens_ = 0;                  // of the step running (optim/step.h)
  size_t n_;                                // values of the flat layout
  BackendBuffer<float> moment1_, moment2_;  // (n_) on the device
  std::vector<AdamDecayRun> runs_;          // where weight decay applies, in the flat layout
  ParamSet host_params_;                    // the checkpoint's copies
  Buffer<float> host_m_, host_v_;
};

}  // namespace agoq
