// TrainSession::checkpoint: every checkpoint is the whole HF model, whatever the grid. ZeRO gathers the moments to a
// stage's first replica, tensor parallelism a layer's shards to TP rank 0 (8-bit moments: each shard's as they are,
// tp<r>.*), a pipeline all stages' tensors to rank 0, and rank 0 writes. On resume every rank reads its stage's
// whole tensors and keeps its shard's slices (8-bit moments of the same TP degree: its own; TrainSession::resume).
#include <algorithm>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json_read.h"
#include "core/stop_signal.h"
#include "formats/checkpoint.h"
#include "formats/safetensors.h"
#include "train/run_dir.h"
#include "train/session.h"

namespace agoq {

namespace fs = std::filesystem;

namespace {

void* tensor_ptr(const NamedTensor& t) { return t.raw ? t.raw : static_cast<void*>(t.data); }

// "name dtype d0 d1 ..\n" per tensor: what a stage's moments are (their form is the run's, the same on every stage,
// but their scale tensors depend on the stage's units).
std::string tensors_describe(const NamedTensors& ts) {
  std::ostringstream os;
  for (const NamedTensor& t : ts) {
    os << t.name << ' ' << t.dtype;
    for (int64_t d : t.shape) os << ' ' << d;
    os << '\n';
  }
  return os.str();
}

// The tensors a description names, laid out in `bytes` (allocated here, 64-byte aligned each).
NamedTensors tensors_of_description(const std::string& text, Buffer<uint8_t>& bytes) {
  NamedTensors out;
  std::istringstream in(text);
  std::vector<size_t> at;
  size_t total = 0;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    NamedTensor t{"", {}, nullptr};
    ls >> t.name >> t.dtype;
    for (int64_t d; ls >> d;) t.shape.push_back(d);
    at.push_back(total);
    total += (safetensors_dtype_size(t.dtype) * size_t(safetensors_numel(t.shape)) + 63) / 64 * 64;
    out.push_back(std::move(t));
  }
  bytes = Buffer<uint8_t>(total, MemCategory::workspace, "ckpt.gather");  // checkpoint-time only
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].dtype == "F32") out[i].data = reinterpret_cast<float*>(bytes.data() + at[i]);
    else out[i].raw = bytes.data() + at[i];
  }
  return out;
}

// Tensors to `to` (their description, then their bytes one by one), and received there into `bytes`.
void tensors_send(Communicator& c, const NamedTensors& ts, int to, int tag) {
  const std::string what = tensors_describe(ts);
  const uint64_t len = what.size();
  c.send(&len, sizeof len, to, tag);
  c.send(what.data(), len, to, tag);
  for (const NamedTensor& t : ts) c.send(tensor_ptr(t), named_tensor_bytes(t), to, tag);
}
NamedTensors tensors_recv(Communicator& c, int from, int tag, Buffer<uint8_t>& bytes) {
  uint64_t len = 0;
  c.recv(&len, sizeof len, from, tag);
  std::string what(len, '\0');
  c.recv(what.data(), len, from, tag);
  NamedTensors ts = tensors_of_description(what, bytes);
  for (NamedTensor& t : ts) c.recv(tensor_ptr(t), named_tensor_bytes(t), from, tag);
  return ts;
}

// Checkpoints of a pipeline: every stage's first replica sends its weights (tensor by tensor, in its named order)
// and its moments (tensors_send) to stage 0, which then holds the whole model's views for checkpoint_save. `held`
// keeps the received tensors alive until the save.
struct GatheredTensors {
  std::vector<ParamSet> weights;
  std::vector<Buffer<uint8_t>> moments;
};
void stages_gather_tensors(Communicator& pipe, const LlamaConfig& cfg, const std::vector<ModelStage>& stages,
                           NamedTensors& weights, NamedTensors& moments, GatheredTensors& held) {
  constexpr int kTag = 21;
  if (pipe.rank() != 0) {
    for (const NamedTensor& t : weights) pipe.send(t.data, named_tensor_bytes(t), 0, kTag);
    tensors_send(pipe, moments, 0, kTag);
    return;
  }
  held.weights.reserve(stages.size());  // the references below must survive the next emplace_back
  for (int s = 1; s < int(stages.size()); ++s) {
    ModelStage whole = stages[s];  // the stage's tensors, their shards already gathered
    whole.tp = 1, whole.tp_rank = 0;
    ParamSet& w = held.weights.emplace_back(cfg, whole, MemCategory::workspace, "ckpt.gather");
    const size_t first_weight = weights.size();
    for (const ParamTensor& t : w.named()) weights.push_back({t.name, t.shape, t.data});
    for (size_t i = first_weight; i < weights.size(); ++i)
      pipe.recv(weights[i].data, named_tensor_bytes(weights[i]), s, kTag);
    for (NamedTensor& t : tensors_recv(pipe, s, kTag, held.moments.emplace_back())) moments.push_back(std::move(t));
  }
}

// 8-bit moments under tensor parallelism: every shard's codes and scales as they are (their blocks run over the
// shard's own layout, which no whole tensor has), named tp<r>.<name>, on TP rank 0; empty on the others.
NamedTensors shards_gather_moments(Communicator& tp, const NamedTensors& mine, GatheredTensors& held) {
  constexpr int kTag = 23;
  if (tp.rank() != 0) {
    tensors_send(tp, mine, 0, kTag);
    return {};
  }
  NamedTensors out = moments_of_shard(mine, 0);
  for (int r = 1; r < tp.size(); ++r)
    for (NamedTensor& t : moments_of_shard(tensors_recv(tp, r, kTag, held.moments.emplace_back()), r))
      out.push_back(std::move(t));
  return out;
}

std::string file_read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  AGOQ_CHECK(in && !bytes.bad(), "cannot read ", p.string());
  return std::move(bytes).str();
}

}  // namespace

MomentsForm moments_form_of(const nlohmann::json& trainer) {
  MomentsForm f;  // checkpoints from before 8-bit states: fp32
  if (!trainer.contains("optim_state")) return f;
  const char* what = "checkpoint's trainer.json";
  const nlohmann::json& state = trainer["optim_state"];
  AGOQ_CHECK(state.is_string(), what, ": optim_state is not a string (", json_excerpt(state), ")");
  try {
    f.state = optim_state_parse(state.get<std::string>());
  } catch (const Error& e) {
    fail(what, ": optim_state: ", e.what());
  }
  if (f.state != OptimState::q8) return f;
  AGOQ_CHECK(trainer.contains("optim_q8") && trainer["optim_q8"].is_object(), what,
             ": optim_state is q8 but optim_q8 (the 8-bit format: block, m_root, v_root) is missing");
  const nlohmann::json& q = trainer["optim_q8"];
  for (auto [key, into] : {std::pair{"block", &f.q8.block}, {"m_root", &f.q8.m_root}, {"v_root", &f.q8.v_root}}) {
    AGOQ_CHECK(q.contains(key) && q[key].is_number_integer() && q[key].get<int64_t>() >= INT_MIN &&
                   q[key].get<int64_t>() <= INT_MAX,
               what, ": optim_q8.", key, " is missing or not an integer");
    *into = q[key].get<int>();
  }
  try {
    adam_q8_format_check(f.q8);
  } catch (const Error& e) {
    fail(what, ": optim_q8: ", e.what());
  }
  return f;
}

DataLoader::State resume_loader_state(const CheckpointMeta& meta, const std::string& dir) {
  const nlohmann::json* loader =
      meta.trainer.is_object() && meta.trainer.contains("loader") ? &meta.trainer["loader"] : nullptr;
  AGOQ_CHECK(loader && loader->is_string(), "checkpoint ", dir,
             ": trainer.json has no data-loader position (\"trainer\": {\"loader\": ...}); it was not written by "
             "`agoq train`");
  try {
    return DataLoader::State::from_string(loader->get<std::string>());
  } catch (const Error& e) {
    fail("checkpoint ", dir, ": trainer.json: ", e.what());
  }
}

// Each checkpoint is a new folder; the link `ckpt` is then switched to it with one atomic rename, and only after that
// is the previous one removed, un-committed first (train/run_dir.h: only when this run may). A crash at any point
// leaves `ckpt` naming a complete checkpoint, and any other folder either complete or without its trainer.json.
void TrainSession::checkpoint(long at_step) {
  engine_->moments_gather();
  NamedTensors weights, moments;
  GatheredTensors held;
  WholeTensors whole_weights, whole_moments;
  if (grid_.replica == 0) {
    weights = engine_->weights_views(), moments = engine_->moments_views();
    if (grid_.T > 1) {  // the shards' tensors, whole on TP rank 0
      const bool root = grid_.tp_rank == 0;
      whole_weights = whole_tensors_of(weights, model_->params(), grid_.T, root);
      whole_tensors_gather(whole_weights, weights, *grid_.tp);
      weights = whole_weights.views;
      if (step_options_.adam.state == OptimState::q8) {
        moments = shards_gather_moments(*grid_.tp, moments, held);
      } else {
        whole_moments = whole_tensors_of(moments, model_->params(), grid_.T, root);
        whole_tensors_gather(whole_moments, moments, *grid_.tp);
        moments = whole_moments.views;
      }
    }
    if (grid_.P > 1 && grid_.tp_rank == 0) stages_gather_tensors(*grid_.pipe, cfg_, stages_, weights, moments, held);
  }
  if (lead_) {
    const std::string name = "ckpt-step" + std::to_string(at_step);
    const fs::path out(opt_.out_dir), dir = out / name;
    nlohmann::json trainer = {{"run", who_.run},
                              {"loader", loader_->state().to_string()},
                              {"seed", opt_.seed},
                              {"world_size", world_.size()},
                              {"pp", grid_.P},
                              {"tp", grid_.T},
                              {"accum", m_},
                              {"grad_store", enum_name(kGradStoreNames, opt_.grad_store)},
                              {"allreduce", enum_name(kAllreduceNames, opt_.allreduce)},
                              {"zero", opt_.zero},
                              {"optim_state", optim_state_name(step_options_.adam.state)},
                              {"compute", enum_name(kGemmPrecisionNames, compute_.gemm)}};
    if (step_options_.adam.state == OptimState::q8)  // the 8-bit format, which moments_form_of reads back
      trainer["optim_q8"] = {{"block", step_options_.adam.q8.block},
                             {"m_root", step_options_.adam.q8.m_root},
                             {"v_root", step_options_.adam.q8.v_root}};
    std::vector<CheckpointFile> files;  // the tokenizer travels with the model, so `agoq sample` needs nothing else
    for (const char* name : kCheckpointCarriedFiles)
      if (const fs::path tok = fs::path(opt_.data_dir) / name; fs::exists(tok)) files.push_back({name, file_read(tok)});
    checkpoint_save(dir.string(), cfg_, weights, moments, trainer, at_step, files, hf_config_);
    if (const std::string kept = ckpt_link_switch(out.string(), name, who_); !kept.empty()) log_->note(kept);
    log_->note("checkpoint: step " + std::to_string(at_step) + " -> " + (out / "ckpt").string());
  }
  held = {};
  whole_weights = {}, whole_moments = {};
  engine_->moments_release();
  if (world_.size() > 1) world_.barrier();  // the checkpoint is complete when any rank returns
  stop_signals_note(stop_note(at_step).c_str());
}

}  // namespace agoq
