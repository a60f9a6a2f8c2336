// One optimizer step of a model on the GPU, in one process: CpuStep's twin for a single replica
// (parallel/step_cpu.h), in the same two calls around the micro-batches:
//
//   runs = step.step_begin(step, m)     each micro-batch's seeds (step_act_seed, step_grad_seed) and 1/m scale
//   loss_sum = train_step_micro_batches(step, model, ..., runs)   with the 8-bit store, part_done folds each
//                                        finished unit into it
//   result = step.step_end(lr, loss_sum)   the norm, then optim/step_core.h's check, clipping and AdamW with fp32
//                                           moments, on the device
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
#include "optim/step_core.h"
#include "optim/train_step.h"

namespace agoq {

class CudaStep final : public TrainStep, private StepDevice {
 public:
  // model: on `gpu`, writing its gradients into its own fp32 buffer (q8_grads null) or into q8_grads' storage
  // (the store the model was built on, kept here). adam.state must be fp32.
  CudaStep(LlamaModel& model, CudaBackend& gpu, std::unique_ptr<CudaGradStore> q8_grads, const AdamWConfig& adam,
           float clip, uint64_t seed);

  std::vector<MicroBatchRun> step_begin(long step, int m, double loss_tokens = 0) override;
  void part_done(const MicroBatchRun& run, int j, int part) override;
  StepResult step_end(float lr, double loss_sum) override;

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
  // StepDevice
  int unit_count() const override;
  std::vector<StepRange> unit_pieces(int u) override;
  float* gradient(int u, StepRange p) override;
  void scale(float* g, size_t n, float factor) override;
  void adamw(int u, const float* g, StepRange p, float lr, long step) override;
  void unit_done(int u) override;

  LlamaModel& model_;
  CudaBackend& gpu_;
  std::unique_ptr<CudaGradStore> q8_;
  AdamWConfig adam_;
  float clip_;
  uint64_t seed_;
  long step_ = 0;
  int m_ = 1;
  double loss_tokens_ = 0;                  // of the step running (optim/train_step.h)
  size_t n_;                                // values of the flat layout
  BackendBuffer<float> moment1_, moment2_;  // (n_) on the device
  std::vector<AdamDecayRun> runs_;          // where weight decay applies, in the flat layout
  ParamSet host_params_;                    // the checkpoint's copies
  Buffer<float> host_m_, host_v_;
};

}  // namespace agoq
