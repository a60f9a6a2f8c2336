// Model shapes `agoq plan` knows by name (docs/plan.md says where each comes from), and the resolver that also
// accepts a Hugging Face config.json path.
#pragma once
#include <string>
#include <vector>

#include "arch/config.h"

namespace agoq {

// "llama-8b" (LLaMA-3 8B), "llama-13b" (LLaMA-2 13B), "llama-32b" (a Qwen2.5-32B-shaped LLaMA).
std::vector<std::string> plan_preset_names();
// Throws agoq::Error listing the known names.
LlamaConfig plan_preset(const std::string& name);
// A preset name, or a path to an HF config.json (arch/hf.h's config_from_hf_json).
LlamaConfig plan_model_resolve(const std::string& name_or_path);

}  // namespace agoq
