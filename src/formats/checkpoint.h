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
  nlohmann::json trainer;                    // as given to checkpoint_save
  nlohmann::json hf_config;                  // config.json as read (config is what agoq makes of it)
  std::vector<std::string> optimizer_names;  // tensors in optimizer.safetensors, sorted
};

// A file a checkpoint carries as it is (the tokenizer); the commit covers it like the tensors.
struct CheckpointFile {
  std::string name;  // one of kCheckpointCarriedFiles
  std::string bytes;
};

// The files a checkpoint may carry besides its own four.
inline constexpr const char* kCheckpointCarriedFiles[] = {"tokenizer.model", "tokenizer.json", "tokenizer_config.json",
                                                          "special_tokens_map.json"};

// Saves a checkpoint into dir (created if needed; an existing one must be a real folder holding only checkpoint
// files, see checkpoint_foreign_entry). `weights` must be exactly hf_tensors(config) (any
// order); `optimizer` is free-form. Throws agoq::Error; an interrupted save never loads as valid, and a failed one
// leaves no temporary file behind (nor the folder, when this save created it). `original_config`: the config.json
// the model came with (a pretrained one), whose fields agoq does not write are kept in config.json.
void checkpoint_save(const std::string& dir, const LlamaConfig& config, const NamedTensors& weights,
                     const NamedTensors& optimizer, const nlohmann::json& trainer, int64_t step,
                     const std::vector<CheckpointFile>& files = {}, const nlohmann::json& original_config = {});

// Deletes a checkpoint: un-commits it first (trainer.json removed and synced), so a kill midway leaves a folder that
// loading refuses ("trainer.json missing"), never one that looks complete. Only a checkpoint's own files go (and
// their temporaries); the folder is removed when nothing else is left in it. Returns the first other entry that
// kept it, or "" when the folder is gone.
std::string checkpoint_remove(const std::string& dir);

// The first entry of `dir` that is not a file a checkpoint holds (or its temporary), or "" when there is none: a
// folder with another entry is not agoq's to write over or delete.
std::string checkpoint_foreign_entry(const std::string& dir);

// What trainer.json says of its save, read without checking the rest: whether it is agoq's marker at all, its
// commit id and the run that wrote it ("" before checkpoints named their run). Absent or unreadable: not one.
struct CheckpointMarker {
  bool is_checkpoint = false;
  std::string commit, run;
};
CheckpointMarker checkpoint_marker_read(const std::string& dir);

// Reads config + trainer state and checks that all four files belong to the same completed save (headers only).
CheckpointMeta checkpoint_inspect(const std::string& dir);

// Loads into caller memory. The checkpoint's config must equal `config`; its weights must be exactly `weights`
// (names and shapes). `optimizer` empty skips the optimizer state; otherwise it must match the file's set exactly.
// part: a pipeline stage loads its own tensors, a subset of the file's. A tensor holding NaN or infinity is
// refused after it is read.
CheckpointMeta checkpoint_load(const std::string& dir, const LlamaConfig& config, const NamedTensors& weights,
                               const NamedTensors& optimizer, bool part = false);

}  // namespace agoq
