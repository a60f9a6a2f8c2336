#include "train/dp_flags.h"

#include "core/error.h"

namespace agoq {

namespace {
GradStoreKind grad_store_parse(const std::string& s) {
  AGOQ_CHECK(s == "fp32" || s == "q8", "--grad-store must be fp32 or q8 (got '", s, "')");
  return s == "q8" ? GradStoreKind::q8 : GradStoreKind::fp32;
}

GradReduce grad_reduce_parse(const std::string& s) {
  AGOQ_CHECK(s == "mpi" || s == "q8", "--allreduce must be mpi or q8 (got '", s, "')");
  return s == "q8" ? GradReduce::q8 : GradReduce::fp32;
}
}  // namespace

DpOptions dp_options_of(const TrainOptions& opt, Communicator* stages, Communicator* tensor) {
  DpOptions o;
  o.store.kind = grad_store_parse(opt.grad_store);
  o.store.rounding = opt.grad_rounding == "nearest" ? QuantRounding::nearest : QuantRounding::stochastic;
  o.store.lm_head_pieces = opt.lm_head_grad == "pieces", o.store.max_tokens = size_t(opt.batch) * size_t(opt.seq);
  o.reduce = grad_reduce_parse(opt.allreduce);
  o.zero = opt.zero == 1;
  o.adam = opt.adam, o.clip = opt.clip, o.seed = opt.seed;
  o.stages = stages, o.tensor = tensor;
  return o;
}

}  // namespace agoq
