// TrainSession::checkpoint: every checkpoint is the whole HF model, whatever the grid. ZeRO gathers the moments to a
// stage's first replica, a pipeline all stages' tensors to rank 0, and rank 0 writes.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "train/checkpoint.h"
#include "train/session.h"

namespace agoq {

namespace fs = std::filesystem;

namespace {

size_t tensor_bytes(const NamedTensor& t) {
  size_t n = sizeof(float);
  for (int64_t d : t.shape) n *= size_t(d);
  return n;
}

// Checkpoints of a pipeline: every stage's first replica sends its weights and moments (tensor by tensor, in its
// named order) to stage 0, which then holds the whole model's views for checkpoint_save. `held` keeps the
// received tensors alive until the save.
void stages_gather_tensors(Communicator& pipe, const LlamaConfig& cfg, const std::vector<ModelStage>& stages,
                           NamedTensors& weights, NamedTensors& moments, std::vector<ParamSet>& held) {
  constexpr int kTag = 21;
  if (pipe.rank() != 0) {
    for (const NamedTensor& t : weights) pipe.send(t.data, tensor_bytes(t), 0, kTag);
    for (const NamedTensor& t : moments) pipe.send(t.data, tensor_bytes(t), 0, kTag);
    return;
  }
  held.reserve(held.size() + 3 * stages.size());  // the references below must survive the next emplace_back
  for (int s = 1; s < int(stages.size()); ++s) {
    // Checkpoint-time only, tagged apart from training's buffers.
    ParamSet& w = held.emplace_back(cfg, stages[s], MemCategory::workspace, "ckpt.gather");
    ParamSet& m = held.emplace_back(cfg, stages[s], MemCategory::workspace, "ckpt.gather");
    ParamSet& v = held.emplace_back(cfg, stages[s], MemCategory::workspace, "ckpt.gather");
    const size_t first_weight = weights.size(), first_moment = moments.size();
    for (size_t i = 0; i < w.named().size(); ++i) {
      const ParamTensor& t = w.named()[i];
      weights.push_back({t.name, t.shape, t.data});
      moments.push_back({"adam.m." + t.name, t.shape, m.named()[i].data});
      moments.push_back({"adam.v." + t.name, t.shape, v.named()[i].data});
    }
    for (size_t i = first_weight; i < weights.size(); ++i)
      pipe.recv(weights[i].data, tensor_bytes(weights[i]), s, kTag);
    for (size_t i = first_moment; i < moments.size(); ++i)
      pipe.recv(moments[i].data, tensor_bytes(moments[i]), s, kTag);
  }
}

// Each checkpoint is a new directory; the link `ckpt` is then switched to it with one atomic rename, and only after
// that is the previous one removed, un-committed first. A crash at any point leaves `ckpt` naming a complete
// checkpoint, and any other folder either complete or without its trainer.json.
void ckpt_link_switch(const fs::path& out_dir, const std::string& name) {
  const fs::path link = out_dir / "ckpt";
  const fs::path previous = fs::is_symlink(link) ? fs::read_symlink(link) : fs::path();
  atomic_symlink(name, link.string());
  if (!previous.empty() && previous != name) checkpoint_remove((out_dir / previous).string());
}

std::string file_read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  AGOQ_CHECK(in && !bytes.bad(), "cannot read ", p.string());
  return std::move(bytes).str();
}

}  // namespace

NamedTensors named_tensors_of(ParamSet& p) {
  NamedTensors out;
  for (const ParamTensor& t : p.named()) out.push_back({t.name, t.shape, t.data});
  return out;
}

DataLoader::State resume_loader_state(const CheckpointMeta& meta, const std::string& dir) {
  const nlohmann::json* loader = meta.trainer.is_object() && meta.trainer.contains("loader") ? &meta.trainer["loader"]
                                                                                              : nullptr;
  AGOQ_CHECK(loader && loader->is_string(), "checkpoint ", dir,
             ": trainer.json has no data-loader position (\"trainer\": {\"loader\": ...}); it was not written by "
             "`agoq train`");
  try {
    return DataLoader::State::from_string(loader->get<std::string>());
  } catch (const Error& e) {
    fail("checkpoint ", dir, ": trainer.json: ", e.what());
  }
}

void TrainSession::checkpoint(long at_step) {
  dp_->moments_gather();
  NamedTensors weights, moments;
  std::vector<ParamSet> held;
  if (grid_.replica == 0) {
    weights = named_tensors_of(model_->params()), moments = dp_->moments_views();
    if (grid_.P > 1) stages_gather_tensors(*grid_.pipe, cfg_, stages_, weights, moments, held);
  }
  if (lead_) {
    const std::string name = "ckpt-step" + std::to_string(at_step);
    const fs::path out(opt_.out_dir), dir = out / name;
    const nlohmann::json trainer = {{"loader", loader_->state().to_string()},
                                    {"seed", opt_.seed},
                                    {"world_size", world_.size()},
                                    {"pp", grid_.P},
                                    {"accum", m_},
                                    {"grad_store", opt_.grad_store},
                                    {"allreduce", opt_.allreduce},
                                    {"zero", opt_.zero}};
    std::vector<CheckpointFile> files;  // the tokenizer travels with the model, so `agoq sample` needs nothing else
    const fs::path tok = fs::path(opt_.data_dir) / "tokenizer.model";
    if (fs::exists(tok)) files.push_back({"tokenizer.model", file_read(tok)});
    checkpoint_save(dir.string(), cfg_, weights, moments, trainer, at_step, files);
    ckpt_link_switch(out, name);
    log_->note("checkpoint: step " + std::to_string(at_step) + " -> " + (out / "ckpt").string());
  }
  held.clear();
  dp_->moments_release();
  if (world_.size() > 1) world_.barrier();  // the checkpoint is complete when any rank returns
}

}  // namespace agoq
