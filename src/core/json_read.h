// JSON that agoq reads from outside (config.json, tokenizer.json and tokenizer_config.json, safetensors headers,
// shard indexes, checkpoints' trainer.json, calibration files, JSON-lines examples): one parse with the limits every
// reader needs, and a bounded quotation of a value for error messages.
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace agoq {

// Far deeper than any file agoq reads (a tokenizer.json nests ~6 levels). nlohmann parses without recursion, but
// its dump(), copies and comparisons recurse once per level: a value nested 85,000 levels deep overflows the stack.
inline constexpr int kJsonMaxDepth = 512;

// `text` as JSON, or one agoq::Error that starts with `what` (e.g. "model config /m/config.json") and says why:
// "is not valid JSON (at byte 12 of 40, line 2: <the parser's reason>)", a number beyond a double (1e400), or arrays
// and objects nested deeper than kJsonMaxDepth. Never the library's own "[json.exception...]" text.
nlohmann::json json_parse(std::string_view text, const std::string& what);

// `v` as JSON text for an error message, cut to at most `max_chars` bytes (then "..." follows, at a character
// boundary). The cost is bounded by max_chars, however large or deep the value: a 50 MB string is not walked whole.
std::string json_excerpt(const nlohmann::json& v, size_t max_chars = 80);

}  // namespace agoq
