#include "parallel/pipeline.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace agoq {

namespace {
// Message tags: activations go forward, their gradients backward, evaluation activations apart from training's.
constexpr int kTagActivation = 11, kTagGradient = 12, kTagEval = 13;
}  // namespace

std::vector<PipeOp> pipeline_schedule_1f1b(int P, int r, int m) {
  AGOQ_CHECK(P >= 1 && r >= 0 && r < P && m >= 1, "1F1B schedule of stage ", r, " of ", P, " over ", m,
             " micro-batches");
  std::vector<PipeOp> ops;
  const int warmup = std::min(P - r - 1, m);
  int f = 0, b = 0;
  while (f < warmup) ops.push_back({PipeOpKind::forward, f++});  // 1. warm-up: fill the pipeline
  while (f < m) {                                                // 2. steady state: one forward, one backward
    ops.push_back({PipeOpKind::forward, f++});
    ops.push_back({PipeOpKind::backward, b++});
  }
  while (b < m) ops.push_back({PipeOpKind::backward, b++});  // 3. cool-down: drain it
  return ops;
}

int pipeline_in_flight(int P, int r, int m) { return std::min(P - r, m); }

Pipeline::Pipeline(Communicator& stages, LlamaModel& model, int B, int T)
    : comm_(stages), model_(model), P_(stages.size()), r_(stages.rank()), rows_cap_(size_t(B) * T) {
  const ModelStage& st = model.stage();
  AGOQ_CHECK(st.embed == (r_ == 0) && st.head == (r_ == P_ - 1), "pipeline rank ", r_, " of ", P_,
             " holds the wrong stage of the model");
  // A sequence-parallel shard sends its rows of the residual stream to the same TP rank of the next stage.
  const size_t n = size_t(st.rows_held(int(rows_cap_))) * size_t(model.config().dim);
  for (Buffer<float>& b : out_) b = Buffer<float>(n, MemCategory::communication, "pipe.send");
}

Pipeline::~Pipeline() {
  try {
    wait_sends();
  } catch (...) {  // the job is ending anyway; a destructor must not throw
  }
}

void Pipeline::send(const float* src, int dst, int tag) {
  const int i = out_next_;
  out_next_ ^= 1;
  out_req_[i].wait();
  const size_t bytes = out_[i].size() * sizeof(float);
  std::memcpy(out_[i].data(), src, bytes);
  out_req_[i] = comm_.isend(out_[i].data(), bytes, dst, tag);
}

size_t Pipeline::message_bytes(int B, int T) const {
  AGOQ_CHECK(size_t(B) * T == rows_cap_, "pipeline built for ", rows_cap_, " tokens per micro-batch, got ", B, "x", T);
  return size_t(model_.stage().rows_held(int(rows_cap_))) * size_t(model_.config().dim) * sizeof(float);
}

void Pipeline::progress() {
  for (CommRequest& q : out_req_) q.test();
}

void Pipeline::wait_sends() {
  for (CommRequest& q : out_req_) q.wait();
}

// A stage's forward layer by layer, its pending sends moving in between.
void Pipeline::forward(const int32_t* inputs, int B, int T, const MicroBatchRun& run) {
  model_.stage_forward_begin(inputs, B, T, run);
  for (int l = model_.stage().first_layer; l < model_.stage().end_layer; ++l) {
    model_.stage_forward_layer(l, B, T);
    progress();
  }
}

double Pipeline::run(const int32_t* inputs, const int32_t* targets, int B, int T,
                     const std::vector<MicroBatchRun>& runs, CpuStep* step) {
  const size_t rows = rows_cap_, bytes = message_bytes(B, T);
  const bool first = r_ == 0, last = r_ == P_ - 1;
  const int m = int(runs.size()), K = model_.store_count();
  AGOQ_CHECK(K >= pipeline_in_flight(P_, r_, m), "stage ", r_, " has ", K, " activation stores, 1F1B over ", m,
             " micro-batches needs ", pipeline_in_flight(P_, r_, m));
  double loss_sum = 0;
  trace_.clear();
  for (const PipeOp& op : pipeline_schedule_1f1b(P_, r_, m)) {
    const int j = op.micro;
    const int32_t* in = inputs + size_t(j) * rows;
    MicroBatchRun run = runs[j];
    // In-flight micro-batches form a window of at most K consecutive ones: j mod K is free when j starts.
    run.store = j % K;
    if (op.kind == PipeOpKind::forward) {
      if (!first) comm_.recv(model_.stage_input(), bytes, r_ - 1, kTagActivation);
      forward(in, B, T, run);
      // The last stage's backward follows its forward at once (no warm-up): the loss gradient is its start.
      if (last) {
        loss_sum += model_.stage_head(targets + size_t(j) * rows, B, T, run, true);
        if (step) step->part_done(run, j, model_.config().n_layers);
      } else {
        send(model_.stage_output(), r_ + 1, kTagActivation);
      }
    } else {
      if (!last) comm_.recv(model_.stage_output_grad(), bytes, r_ + 1, kTagGradient);
      model_.stage_backward_begin(B, T, run);
      for (int part : model_.backward_parts()) {
        model_.stage_backward_part(part, in, B, T, run);
        if (step) step->part_done(run, j, part);
        progress();
      }
      if (!first) send(model_.stage_input_grad(), r_ - 1, kTagGradient);
    }
    trace_.push_back(op);
  }
  wait_sends();
  return loss_sum;
}

double Pipeline::forward_loss_sum(const EvalBatch& batch, int n, int B, int T, double loss_tokens, bool documents) {
  const size_t rows = rows_cap_, bytes = message_bytes(B, T);
  std::vector<int32_t> in(rows), tgt(rows), docs(documents ? rows : 0);
  MicroBatchRun run;
  run.loss_tokens = loss_tokens;
  run.doc_start = documents ? docs.data() : nullptr;
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    batch(i, in.data(), tgt.data(), run.doc_start ? docs.data() : nullptr);
    if (r_ > 0) comm_.recv(model_.stage_input(), bytes, r_ - 1, kTagEval);
    forward(in.data(), B, T, run);
    if (r_ < P_ - 1) send(model_.stage_output(), r_ + 1, kTagEval);
    else sum += model_.stage_head(tgt.data(), B, T, run, false);
  }
  wait_sends();
  comm_.broadcast(&sum, sizeof sum, P_ - 1);
  return sum;
}

}  // namespace agoq
