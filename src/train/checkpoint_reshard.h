// Checkpoints of a resharded run: every checkpoint holds the whole model (weights and fp32 moments as whole
// tensors; 8-bit moments per tensor-parallel shard, their blocks running over the shard's own layout), so a run of
// T shards gathers its shards' tensors into whole ones to save and slices them to resume, and a resume of another
// TP degree decodes the file's 8-bit shards into whole fp32 moments (docs/checkpoint-format.md).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "arch/hf.h"
#include "arch/params.h"
#include "comm/communicator.h"
#include "core/memory.h"
#include "optim/step.h"

namespace agoq {

// Bytes of a named tensor's values (F32, or its raw dtype).
size_t named_tensor_bytes(const NamedTensor& t);

// A tensor-parallel shard's tensors (weights, or moments named adam.m./adam.v. + a weight's name) at the whole
// model's shapes, in buffers of their own (workspace, tag ckpt.gather) that exist while a checkpoint is saved or
// loaded (allocate: false, only the split dimensions, for a rank that sends); with T = 1 the views are the shard's
// own tensors and nothing is allocated.
struct WholeTensors {
  std::vector<Buffer<float>> buffers;
  std::vector<int> split_dims;  // of each tensor (model_tensor_split_dim)
  NamedTensors views;
  int T = 1;
};
WholeTensors whole_tensors_of(const NamedTensors& shard, const ParamSet& params, int T, bool allocate = true);
// Copies shard tp_rank's slices of the whole tensors into `shard` (the tensors whole_tensors_of was given).
void whole_tensors_slice(const WholeTensors& whole, const NamedTensors& shard, int tp_rank);
// TP rank 0 receives the other shards' tensors into `whole` (which holds its own slices first); the others send
// theirs. Collective over tp.
void whole_tensors_gather(WholeTensors& whole, const NamedTensors& shard, Communicator& tp);
// 8-bit moments under tensor parallelism are saved per shard (docs/checkpoint-format.md): shard r's tensors under
// the names of a one-shard run prefixed moments_shard_prefix(r). moments_of_shard renames a shard's views so;
// moments_tp_of reads the checkpoint's TP degree (trainer.json "tp"; absent: 1).
NamedTensors moments_of_shard(NamedTensors moments, int tp_rank);
int moments_tp_of(const nlohmann::json& trainer, const LlamaConfig& cfg);

// A checkpoint's 8-bit moments of one pipeline stage as written by a run of T shards (T = 1: whole tensors), in
// buffers of their own (workspace, ckpt.moments) to checkpoint_load into (`tensors`), then decoded into the whole
// fp32 moments adam.m.<name> / adam.v.<name> of the stage: the resume of another TP degree, converting.
struct Q8FileMoments {
  Q8FileMoments(const LlamaConfig& cfg, ModelStage stage, const MomentsForm& file, int T);
  void decode(const LlamaConfig& cfg, const NamedTensors& whole);
  NamedTensors tensors;

 private:
  struct Shard {
    ModelStage stage;
    std::vector<ParamSegment> units;
    std::vector<size_t> scale_at;  // unit u's first block
    Buffer<int8_t> m_codes;
    Buffer<uint8_t> v_codes;
    Buffer<float> m_scales, v_scales;
  };
  AdamQ8Format form;
  std::vector<Shard> shards;
};

}  // namespace agoq
