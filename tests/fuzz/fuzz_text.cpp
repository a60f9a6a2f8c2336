// Fuzz targets of the text a user or a config file gives: config.json, --act-policy, size strings and
// --stage-layers (fuzz_target.h).
#include <nlohmann/json.hpp>

#include "arch/act_policy.h"
#include "arch/hf.h"
#include "arch/stage.h"
#include "core/error.h"
#include "core/json_read.h"
#include "plan/memory_model.h"
#include "tests/fuzz/fuzz_target.h"

namespace agoq::fuzz {

int hf_config(const uint8_t* data, size_t size) {
  try {  // (parsed as agoq parses every config.json: nesting bounded, quoted values cut short)
    const LlamaConfig c = config_from_hf_json(json_parse(text_of(data, size), "config.json"));
    c.validate();
    (void)config_to_hf_json(c);
    (void)c.param_count();
  } catch (const Error& e) {
    refused(e);
  }
  return 0;
}

// First byte: the layer count (1..64); the rest: the spec.
int act_policy(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  try {
    const ActPolicy p = ActPolicy::parse(std::string(text_of(data + 1, size - 1)), 1 + data[0] % 64);
    (void)p.describe();
  } catch (const Error& e) {
    refused(e);
  }
  return 0;
}

// First byte even: a size string; odd: a --stage-layers list for (byte / 2) % 8 + 1 stages of a 12-layer model.
int flags(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(text_of(data + 1, size - 1));
  try {
    if (data[0] % 2 == 0) {
      (void)plan_parse_bytes(text, "--mem-budget");
    } else {
      LlamaConfig c;
      c.n_layers = 12;
      (void)model_stages_split(c, (data[0] / 2) % 8 + 1, text);
    }
  } catch (const Error& e) {
    refused(e);
  }
  return 0;
}

}  // namespace agoq::fuzz
