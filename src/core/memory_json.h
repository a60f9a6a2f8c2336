// Bytes by memory category as JSON, the one form every report writes them in (metrics.jsonl, `plan --json`,
// `inspect --json`, the benchmarks): {"weights": ..., "grads": ..., ...}, keyed by mem_category_name.
#pragma once
#include <array>
#include <nlohmann/json.hpp>

#include "core/memory.h"

namespace agoq {

inline nlohmann::json mem_bytes_json(const std::array<size_t, kMemCategoryCount>& bytes) {
  nlohmann::json j = nlohmann::json::object();
  for (int c = 0; c < kMemCategoryCount; ++c) j[mem_category_name(MemCategory(c))] = bytes[c];
  return j;
}

}  // namespace agoq
