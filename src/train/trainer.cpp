// train_run and the session's stateless parts: flag validation and what ranks compare at start-up.
#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <variant>
#include <vector>

#include "arch/config_fields.h"
#include "core/error.h"
#include "core/hash.h"
#include "train/session.h"

namespace agoq {

namespace fs = std::filesystem;

void train_options_validate(const TrainOptions& o) {
  AGOQ_CHECK(o.batch >= 1, "--batch must be >= 1 (got ", o.batch, ")");
  AGOQ_CHECK(o.seq >= 1, "--seq must be >= 1 (got ", o.seq, ")");
  AGOQ_CHECK(o.accum >= 1, "--accum must be >= 1 (got ", o.accum, ")");
  AGOQ_CHECK(o.steps >= 1, "--steps must be >= 1 (got ", o.steps, ")");
  AGOQ_CHECK(o.warmup >= 0, "--warmup must be >= 0 (got ", o.warmup, ")");
  AGOQ_CHECK(std::isfinite(o.lr) && o.lr > 0, "--lr must be a positive number (got ", o.lr, ")");
  AGOQ_CHECK(std::isfinite(o.min_lr) && o.min_lr >= 0 && o.min_lr <= o.lr, "--min-lr must be in [0, lr] (got ",
             o.min_lr, ")");
  AGOQ_CHECK(std::isfinite(o.clip) && o.clip > 0, "--clip must be a positive number (got ", o.clip, ")");
  // AdamW: moments decay by beta per step, so beta must be in [0, 1); eps keeps the update finite.
  AGOQ_CHECK(o.adam.beta1 >= 0 && o.adam.beta1 < 1, "--beta1 must be in [0, 1) (got ", o.adam.beta1, ")");
  AGOQ_CHECK(o.adam.beta2 >= 0 && o.adam.beta2 < 1, "--beta2 must be in [0, 1) (got ", o.adam.beta2, ")");
  AGOQ_CHECK(std::isfinite(o.adam.eps) && o.adam.eps > 0, "AdamW eps must be a positive number (got ", o.adam.eps, ")");
  AGOQ_CHECK(std::isfinite(o.adam.weight_decay) && o.adam.weight_decay >= 0,
             "--weight-decay must be a number >= 0 (got ", o.adam.weight_decay, ")");
  AGOQ_CHECK(o.eval_every >= 0, "--eval-every must be >= 0 (got ", o.eval_every, "; 0: only at the end)");
  AGOQ_CHECK(o.eval_batches >= 1, "--eval-batches must be >= 1 (got ", o.eval_batches, ")");
  AGOQ_CHECK(o.ckpt_every >= 0, "--ckpt-every must be >= 0 (got ", o.ckpt_every, "; 0: only at the end)");
  AGOQ_CHECK(o.stop_after >= 0, "--stop-after must be >= 0 (got ", o.stop_after, "; 0: run to --steps)");
  AGOQ_CHECK(o.log_every >= 0, "--log-every must be >= 0 (got ", o.log_every, ")");
  AGOQ_CHECK(o.init_from.empty() || o.resume.empty(),
             "--init-from starts a fine-tune and --resume continues one: "
             "give one of them (a fine-tune's own checkpoint resumes with --resume alone)");
  AGOQ_CHECK(o.zero == 0 || o.zero == 1, "--zero must be 0 or 1 (got ", o.zero, ")");
  AGOQ_CHECK(o.replan_after >= 1, "--replan-after must be >= 1 (got ", o.replan_after, ")");
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

std::string model_flags_disagreeing(const TrainOptions& o, const LlamaConfig& ck, const char* source) {
  const LlamaConfig& m = o.model;
  std::ostringstream out;
  auto field = [&](const std::string& flag, const auto& given, const auto& saved) {
    if (std::find(o.model_flags.begin(), o.model_flags.end(), flag) == o.model_flags.end() || given == saved) return;
    out << (out.tellp() > 0 ? ", " : "") << flag << ' ' << given << " (" << source << ": " << saved << ')';
  };
  for (const ConfigField& f : kConfigFields)
    if (f.flag) std::visit([&](auto member) { field(f.flag, m.*member, ck.*member); }, f.member);
  if (std::find(o.model_flags.begin(), o.model_flags.end(), "--config") != o.model_flags.end()) {
    LlamaConfig file = m;  // the data and the sequence length decide these two, not the file
    file.vocab_size = ck.vocab_size, file.max_seq_len = ck.max_seq_len;
    const std::string diff = config_diff(file, ck);
    if (!diff.empty()) out << (out.tellp() > 0 ? ", " : "") << "--config (file vs " << source << ": " << diff << ')';
  }
  return out.str();
}

std::string file_digest(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  AGOQ_CHECK(f, "cannot open ", p.string());
  std::vector<char> buf(1 << 20);
  uint64_t h = kHashFnv1a64Basis, size = 0;
  while (f.read(buf.data(), std::streamsize(buf.size())) || f.gcount() > 0) {
    h = hash_fnv1a64(buf.data(), size_t(f.gcount()), h);
    size += uint64_t(f.gcount());
  }
  std::ostringstream os;
  os << p.filename().string() << ' ' << size << " bytes fnv " << std::hex << h;
  return os.str();
}

std::string train_run_description(const TrainOptions& o, const LlamaConfig& cfg, const std::string& resume_commit) {
  std::ostringstream os;
  os << "model " << config_to_hf_json(cfg).dump() << "\nbatch " << o.batch << " seq " << o.seq << " accum " << o.accum
     << " steps " << o.steps << " warmup " << o.warmup << " lr " << o.lr << " min_lr " << o.min_lr << " clip " << o.clip
     << " adam " << o.adam.beta1 << ' ' << o.adam.beta2 << ' ' << o.adam.eps << ' ' << o.adam.weight_decay << " seed "
     << o.seed << " eval " << o.eval_every << ' ' << o.eval_batches << " ckpt " << o.ckpt_every << " stop_after "
     << o.stop_after << " act " << o.act_policy << " grad_store " << enum_name(kGradStoreNames, o.grad_store)
     << " allreduce " << enum_name(kAllreduceNames, o.allreduce) << " rounding "
     << enum_name(kGradRoundingNames, o.grad_rounding) << " lm_head_grad "
     << enum_name(kLmHeadGradNames, o.lm_head_grad) << " optim_state " << optim_state_name(o.adam.state) << " zero "
     << o.zero << " pp " << o.pp << ' ' << o.stage_layers << " tp " << o.tp << " sp " << o.sp << " mem_budget "
     << o.mem_budget << ' ' << o.replan_after << " resume " << resume_commit << " init_from " << o.init_from
     << " compute " << enum_name(kComputeNames, o.compute);
  return os.str();
}

TrainResult train_run(const TrainOptions& opt) {
  TrainSession session(opt);
  return session.run();
}

}  // namespace agoq
