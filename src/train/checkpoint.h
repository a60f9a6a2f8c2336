// Checkpoints: a directory Hugging Face's LlamaForCausalLM.from_pretrained() can load, plus training state.
//   config.json            HF LlamaConfig
//   model.safetensors      weights under HF names (model.layers.{i}.self_attn.q_proj.weight, ...), F32
//   optimizer.safetensors  arbitrary named F32 tensors (e.g. "adam.m.<param name>")
//   tokenizer.model, ...   files stored as given (checkpoint_save's `files`)
//   trainer.json           {"format", "step", "commit", "config", "files", "trainer": <the trainer's JSON>}
// Saving writes every file as *.tmp (fsynced, core/atomic_file.h), removes the old trainer.json, renames the others
// into place and renames trainer.json last: it is the commit marker. Its "commit" id is also stored in both safetensors
// headers, its "config" must equal config.json and its "files" give the size and hash of every other file, so a save
// interrupted at any point is refused on load instead of mixing two checkpoints. See docs/checkpoint-format.md.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "arch/config.h"
#include "arch/hf.h"

namespace agoq {

// What trainer.json says, after the whole checkpoint has been checked for consistency.
struct CheckpointMeta {
  LlamaConfig config;
  int64_t step = 0;
  std::string commit;
  nlohmann::json trainer;                   // as given to checkpoint_save
  std::vector<std::string> optimizer_names;  // tensors in optimizer.safetensors, sorted
};

// A file a checkpoint carries as it is (the tokenizer); the commit covers it like the tensors.
struct CheckpointFile {
  std::string name;  // a plain file name
  std::string bytes;
};

// Saves a checkpoint into dir (created if needed). `weights` must be exactly hf_tensors(config) (any
// order); `optimizer` is free-form. Throws agoq::Error; an interrupted save never loads as valid, and a failed one
// leaves no temporary file behind (nor the folder, when this save created it).
void checkpoint_save(const std::string& dir, const LlamaConfig& config, const NamedTensors& weights,
                     const NamedTensors& optimizer, const nlohmann::json& trainer, int64_t step,
                     const std::vector<CheckpointFile>& files = {});

// Deletes a checkpoint: un-commits it first (trainer.json removed and synced), so a kill midway leaves a folder that
// loading refuses ("trainer.json missing"), never one that looks complete.
void checkpoint_remove(const std::string& dir);

// Reads config + trainer state and checks that all four files belong to the same completed save (headers only).
CheckpointMeta checkpoint_inspect(const std::string& dir);

// Loads into caller memory. The checkpoint's config must equal `config`; its weights must be exactly `weights`
// (names and shapes). `optimizer` empty skips the optimizer state; otherwise it must match the file's set exactly.
// part: a pipeline stage loads its own tensors, a subset of the file's. A tensor holding NaN or infinity is
// refused after it is read.
CheckpointMeta checkpoint_load(const std::string& dir, const LlamaConfig& config, const NamedTensors& weights,
                               const NamedTensors& optimizer, bool part = false);

}  // namespace agoq
