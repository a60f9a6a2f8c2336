// Pipeline parallelism, non-interleaved 1F1B (docs/parallel.md). The decoder layers are cut into P contiguous
// stages (arch/stage.h), one rank each within a data-parallel replica; a micro-batch's activations travel
// forward from stage to stage and their gradients back, by non-blocking point-to-point messages.
//
// Stage r of P runs m micro-batches as: a warm-up of min(P - r - 1, m) forwards, then one forward and one
// backward alternately, then the cool-down backwards. So stage r holds the saved activations of at most
// min(P - r, m) micro-batches at once: the first stage is the tightest, the last holds one.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "comm/communicator.h"
#include "core/memory.h"
#include "model/llama.h"
#include "parallel/step_cpu.h"

namespace agoq {

enum class PipeOpKind : uint8_t { forward, backward };
struct PipeOp {
  PipeOpKind kind;
  int micro;
  bool operator==(const PipeOp&) const = default;
};

// The 1F1B order of stage r of P over m micro-batches.
std::vector<PipeOp> pipeline_schedule_1f1b(int P, int r, int m);
// Most micro-batches whose activations stage r holds at once under 1F1B: min(P - r, m).
int pipeline_in_flight(int P, int r, int m);

class Pipeline {
 public:
  // `stages`: the P ranks of this replica's pipeline, rank = stage index; `model` is this rank's stage, built with
  // pipeline_in_flight(P, r, m) activation stores for micro-batches of up to B x T tokens.
  Pipeline(Communicator& stages, LlamaModel& model, int B, int T);
  ~Pipeline();

  // One step's m = runs.size() micro-batches (inputs/targets back to back, B x T each; every stage gets the same
  // ones) through the schedule, micro-batch j with runs[j] (its seeds and grad scale; backwards run in order
  // j = 0 .. m-1), each backward part by part with step->part_done(run, j, part) after each (parallel/step_cpu.h;
  // null: nobody acts on them, the model accumulates in its own fp32 buffer). Returns the sum of the micro-batch
  // losses on the last stage, 0 elsewhere.
  double run(const int32_t* inputs, const int32_t* targets, int B, int T, const std::vector<MicroBatchRun>& runs,
             CpuStep* step = nullptr);
  // Forward only, n batches from batch(i, inputs, targets, doc_start): the sum of their mean losses (each over
  // loss_tokens when it is set: MicroBatchRun), on every stage. With `documents`, batch() writes each row's
  // document start too, and attention masks by it.
  using EvalBatch = std::function<void(int, int32_t*, int32_t*, int32_t*)>;
  double forward_loss_sum(const EvalBatch& batch, int n, int B, int T, double loss_tokens = 0, bool documents = false);

  // The operations run() executed, in order (tests check it against the 1F1B definition).
  const std::vector<PipeOp>& trace() const { return trace_; }

 private:
  // Sends a copy of src (the next forward or backward overwrites the model's buffer) without waiting for it.
  void send(const float* src, int dst, int tag);
  void progress();  // lets pending sends move while a stage computes (between its layers)
  void forward(const int32_t* inputs, int B, int T, const MicroBatchRun& run);
  size_t message_bytes(int B, int T) const;  // of one activation or gradient message; checks the batch shape
  void wait_sends();

  Communicator& comm_;
  LlamaModel& model_;
  int P_, r_;
  size_t rows_cap_;
  // Double-buffered outgoing messages: a buffer is reused only after its previous send completed.
  Buffer<float> out_[2];
  CommRequest out_req_[2];
  int out_next_ = 0;
  std::vector<PipeOp> trace_;
};

}  // namespace agoq
