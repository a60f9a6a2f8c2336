// TrainSession::checkpoint: every checkpoint is the whole HF model, whatever the grid. ZeRO gathers the moments to a
// stage's first replica, a pipeline all stages' tensors to rank 0, and rank 0 writes.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "train/checkpoint.h"
#include "train/safetensors.h"
#include "train/session.h"

namespace agoq {

namespace fs = std::filesystem;

namespace {

size_t tensor_bytes(const NamedTensor& t) {
  size_t n = t.raw ? safetensors_dtype_size(t.dtype) : sizeof(float);
  for (int64_t d : t.shape) n *= size_t(d);
  return n;
}
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

// Checkpoints of a pipeline: every stage's first replica sends its weights (tensor by tensor, in its named order)
// and its moments (their description, then tensor by tensor) to stage 0, which then holds the whole model's views
// for checkpoint_save. `held` keeps the received tensors alive until the save.
struct GatheredTensors {
  std::vector<ParamSet> weights;
  std::vector<Buffer<uint8_t>> moments;
};
void stages_gather_tensors(Communicator& pipe, const LlamaConfig& cfg, const std::vector<ModelStage>& stages,
                           NamedTensors& weights, NamedTensors& moments, GatheredTensors& held) {
  constexpr int kTag = 21;
  if (pipe.rank() != 0) {
    for (const NamedTensor& t : weights) pipe.send(t.data, tensor_bytes(t), 0, kTag);
    const std::string what = tensors_describe(moments);
    const uint64_t len = what.size();
    pipe.send(&len, sizeof len, 0, kTag);
    pipe.send(what.data(), len, 0, kTag);
    for (const NamedTensor& t : moments) pipe.send(tensor_ptr(t), tensor_bytes(t), 0, kTag);
    return;
  }
  held.weights.reserve(stages.size());  // the references below must survive the next emplace_back
  for (int s = 1; s < int(stages.size()); ++s) {
    ParamSet& w = held.weights.emplace_back(cfg, stages[s], MemCategory::workspace, "ckpt.gather");
    const size_t first_weight = weights.size();
    for (const ParamTensor& t : w.named()) weights.push_back({t.name, t.shape, t.data});
    for (size_t i = first_weight; i < weights.size(); ++i)
      pipe.recv(weights[i].data, tensor_bytes(weights[i]), s, kTag);
    uint64_t len = 0;
    pipe.recv(&len, sizeof len, s, kTag);
    std::string what(len, '\0');
    pipe.recv(what.data(), len, s, kTag);
    for (NamedTensor& t : tensors_of_description(what, held.moments.emplace_back())) {
      pipe.recv(tensor_ptr(t), tensor_bytes(t), s, kTag);
      moments.push_back(std::move(t));
    }
  }
}

// Each checkpoint is a new directory; the link `ckpt` is then switched to it with one atomic rename, and only after
// that is the previous one removed. A crash at any point leaves `ckpt` naming a complete checkpoint.
void ckpt_link_switch(const fs::path& out_dir, const std::string& name) {
  const fs::path link = out_dir / "ckpt";
  const fs::path previous = fs::is_symlink(link) ? fs::read_symlink(link) : fs::path();
  atomic_symlink(name, link.string());
  if (!previous.empty() && previous != name) fs::remove_all(out_dir / previous);
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
  try {
    f.state = optim_state_parse(trainer.at("optim_state").get<std::string>());
    if (f.state == OptimState::q8) {
      const nlohmann::json& q = trainer.at("optim_q8");
      f.q8.block = q.at("block").get<int>(), f.q8.m_root = q.at("m_root").get<int>();
      f.q8.v_root = q.at("v_root").get<int>();
      adam_q8_format_check(f.q8);
    }
  } catch (const std::exception& e) {
    fail("checkpoint's trainer.json: optimizer state: ", e.what());
  }
  return f;
}

NamedTensors named_tensors_of(ParamSet& p) {
  NamedTensors out;
  for (const ParamTensor& t : p.named()) out.push_back({t.name, t.shape, t.data});
  return out;
}

void TrainSession::checkpoint(long at_step) {
  dp_->moments_gather();
  NamedTensors weights, moments;
  GatheredTensors held;
  if (grid_.replica == 0) {
    weights = named_tensors_of(model_->params()), moments = dp_->moments_views();
    if (grid_.P > 1) stages_gather_tensors(*grid_.pipe, cfg_, stages_, weights, moments, held);
  }
  if (lead_) {
    const std::string name = "ckpt-step" + std::to_string(at_step);
    const fs::path out(opt_.out_dir), dir = out / name;
    nlohmann::json trainer = {{"loader", loader_->state().to_string()},
                              {"seed", opt_.seed},
                              {"world_size", world_.size()},
                              {"pp", grid_.P},
                              {"accum", m_},
                              {"grad_store", opt_.grad_store},
                              {"allreduce", opt_.allreduce},
                              {"zero", opt_.zero},
                              {"optim_state", optim_state_name(opt_.adam.state)}};
    if (opt_.adam.state == OptimState::q8)  // the 8-bit format, which moments_form_of reads back
      trainer["optim_q8"] = {{"block", opt_.adam.q8.block}, {"m_root", opt_.adam.q8.m_root},
                             {"v_root", opt_.adam.q8.v_root}};
    checkpoint_save(dir.string(), cfg_, weights, moments, trainer, at_step);
    const fs::path tok = fs::path(opt_.data_dir) / "tokenizer.model";
    if (fs::exists(tok)) atomic_file_write((dir / "tokenizer.model").string(), file_read(tok));
    ckpt_link_switch(out, name);
    log_->note("checkpoint: step " + std::to_string(at_step) + " -> " + (out / "ckpt").string());
  }
  held = {};
  dp_->moments_release();
  if (world_.size() > 1) world_.barrier();  // the checkpoint is complete when any rank returns
}

}  // namespace agoq
