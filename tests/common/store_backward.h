// A micro-batch through a model that writes into a gradient store (parallel/grad_store.h,
// cuda_train/grad_store_cuda.h), each backward part folded as it finishes, as a step's part_done folds it
// (optim/step.h).
#pragma once
#include <cstdint>

#include "arch/params.h"
#include "model/llama.h"

namespace agoq {

// Backward from the stage_output_grad() the caller wrote (or the head's, after stage_head), part by part.
template <class Store>
void store_backward(LlamaModel& m, Store& store, const int32_t* inputs, int B, int T, const MicroBatchRun& run) {
  m.stage_backward_begin(B, T, run);
  for (int part : m.backward_parts()) {
    m.stage_backward_part(part, inputs, B, T, run);
    store.unit_ready(model_grad_unit_of_layer(m.stage(), part), run.grad_first, run.grad_seed);
  }
}

// The whole model's forward, loss and backward: the loss.
template <class Store>
float store_forward_backward(LlamaModel& m, Store& store, const int32_t* inputs, const int32_t* targets, int B, int T,
                             const MicroBatchRun& run) {
  m.stage_forward(inputs, B, T, run);
  const float loss = m.stage_head(targets, B, T, run, true);
  store.unit_ready(model_grad_unit_of_layer(m.stage(), m.config().n_layers), run.grad_first, run.grad_seed);
  store_backward(m, store, inputs, B, T, run);
  return loss;
}

}  // namespace agoq
