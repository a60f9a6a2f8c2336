// What comes from train_option_rows besides the CLI's flags: the defaults, the checks, the ranks' description.
#include "train/train_options.h"

#include <sstream>
#include <type_traits>

#include "arch/hf.h"
#include "core/error.h"

namespace agoq {

namespace {

// A number outside its row's bounds, said as "--batch must be >= 1 (got 0)".
void option_bounds_check(const char* flag, double v, const OptionSpec& s) {
  const bool low = s.min_open ? v <= s.min : v < s.min, high = s.max_open ? v >= s.max : v > s.max;
  if (!low && !high && std::isfinite(v)) return;
  std::ostringstream want;
  if (s.min == 0 && s.max == 1 && !s.min_open && !s.max_open) want << "0 or 1";
  else if (s.max != HUGE_VAL)
    want << "in " << (s.min_open ? '(' : '[') << s.min << ", " << s.max << (s.max_open ? ')' : ']');
  else if (s.min_open && s.min == 0) want << "a positive number";
  else want << ">= " << s.min;
  fail(flag, " must be ", want.str(), " (got ", v, s.note ? "; " : "", s.note ? s.note : "", ")");
}

// Each row at its default.
struct RowDefault {
  template <class T, class D, class S>
  void operator()(T& field, const char*, const D& def, const char*, const S&) const {
    field = T(def);
  }
};

// Each number checked against its row's bounds; required rows given.
struct RowCheck {
  template <class T, class D, class S>
  void operator()(const T& field, const char* flag, const D&, const char*, const S& spec) const {
    if constexpr (std::is_same_v<S, OptionSpec>) {
      if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) option_bounds_check(flag, double(field), spec);
      if constexpr (std::is_same_v<T, std::string>) AGOQ_CHECK(!spec.required || !field.empty(), flag, " is required");
    }
  }
};

// Each row that every rank must agree on, as "flag value".
struct RowDescribe {
  std::ostringstream& os;
  template <class T, class D, class S>
  void operator()(const T& field, const char* flag, const D&, const char*, const S& spec) const {
    if constexpr (std::is_same_v<S, OptionSpec>)
      if (spec.local) return;
    if constexpr (std::is_enum_v<T>) {
      os << ' ' << flag << ' ' << enum_name(spec, field);
    } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      for (const std::string& s : field) os << ' ' << flag << ' ' << s;
    } else {
      os << ' ' << flag << ' ' << field;
    }
  }
};

}  // namespace

TrainOptions::TrainOptions() { train_option_rows(*this, RowDefault{}); }

void train_options_baseline(TrainOptions& o) {
  o.act_policy = "fp32", o.grad_store = GradStoreKind::fp32, o.allreduce = GradReduce::fp32;
  o.adam.state = OptimState::fp32;
}

TrainOptions train_options_reference() {
  TrainOptions o;
  train_options_baseline(o);
  o.compute = ComputeMode::fp32;
  return o;
}

void train_options_validate(const TrainOptions& o) {
  train_option_rows(o, RowCheck{});
  AGOQ_CHECK(o.min_lr <= o.lr, "--min-lr must be in [0, lr] (got ", o.min_lr, ")");
  AGOQ_CHECK(o.init_from.empty() || o.resume.empty(),
             "--init-from starts a fine-tune and --resume continues one: "
             "give one of them (a fine-tune's own checkpoint resumes with --resume alone)");
  AGOQ_CHECK(
      o.lm_head_grad == LmHeadGrad::whole || o.grad_store == GradStoreKind::q8,
      "--lm-head-grad pieces is a way of the 8-bit gradient store (--grad-store q8); the fp32 store holds every gradient whole");
  if (o.device == TrainDevice::cuda) {  // one GPU, fp32 moments: what the CUDA backend builds so far
    auto gpu_lacks = [](bool refused, const char* what) {
      AGOQ_CHECK(!refused, "--device cuda: ", what, " is not built on the GPU yet (docs/cuda.md)");
    };
    gpu_lacks(o.pp > 1, "pipeline parallelism (--pp)");
    gpu_lacks(o.tp > 1 || o.sp, "tensor parallelism (--tp, --sp)");
    gpu_lacks(o.zero != 0, "ZeRO-1 (--zero)");
    gpu_lacks(o.adam.state != OptimState::fp32, "8-bit AdamW moments (--optim-state q8)");
    gpu_lacks(o.mem_budget > 0, "re-planning the activation bits (--mem-budget)");
    gpu_lacks(o.lm_head_grad == LmHeadGrad::pieces, "the lm_head's gradient in pieces (--lm-head-grad pieces)");
    gpu_lacks(o.profile, "timing the ops by class (--profile)");
  }
}

std::string train_run_description(const TrainOptions& o, const LlamaConfig& cfg, const std::string& resume_commit) {
  std::ostringstream os;
  os << "model " << config_to_hf_json(cfg).dump() << "\n";
  train_option_rows(o, RowDescribe{os});
  os << " resume " << resume_commit;
  return os.str();
}

CpuStepOptions train_cpu_step_options(const TrainOptions& opt, Communicator* stages, Communicator* tensor) {
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
