#include "train/dp_flags.h"

namespace agoq {

CpuStepOptions dp_options_of(const TrainOptions& opt, Communicator* stages, Communicator* tensor) {
  CpuStepOptions o;
  o.store.kind = opt.grad_store, o.store.rounding = opt.grad_rounding;
  o.store.lm_head_pieces = opt.lm_head_grad == LmHeadGrad::pieces;
  o.store.max_tokens = size_t(opt.batch) * size_t(opt.seq);
  o.reduce = opt.allreduce;
  o.zero = opt.zero == 1;
  o.adam = opt.adam, o.clip = opt.clip, o.seed = opt.seed;
  o.stages = stages, o.tensor = tensor;
  return o;
}

}  // namespace agoq
