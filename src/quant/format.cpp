#include "quant/format.h"

#include <charconv>

#include "core/error.h"

namespace agoq {

void quant_format_check(const QuantFormat& f) {
  switch (f.kind) {
    case QuantKind::fp32: AGOQ_CHECK(f.bits == 32, "quant format fp32: bits must be 32, got ", f.bits); break;
    case QuantKind::bf16:
      AGOQ_CHECK(f.bits == 16, "quant format bf16: bits must be 16, got ", f.bits);
      AGOQ_CHECK(f.rounding == QuantRounding::nearest, "quant format bf16: only nearest rounding is supported");
      break;
    case QuantKind::int_group:
      AGOQ_CHECK(f.bits == 2 || f.bits == 3 || f.bits == 4 || f.bits == 8,
                 "quant format int: bits must be 2, 3, 4 or 8, got ", f.bits);
      AGOQ_CHECK(f.group == 32 || f.group == 64 || f.group == 128 || f.group == 256,
                 "quant format int: group must be 32, 64, 128 or 256, got ", f.group);
      break;
    default: fail("quant format: unknown kind ", int(f.kind));
  }
}

std::string quant_format_name(const QuantFormat& f) {
  if (f.kind == QuantKind::fp32) return "fp32";
  if (f.kind == QuantKind::bf16) return "bf16";
  return "int" + std::to_string(f.bits) + ".g" + std::to_string(f.group) + (f.symmetric ? ".sym" : ".asym") +
         (f.rounding == QuantRounding::nearest ? ".nearest" : ".stochastic");
}

QuantFormat quant_format_parse(std::string_view name) {
  if (name == "fp32") return quant_format_fp32();
  if (name == "bf16") return quant_format_bf16();
  auto bad = [&](const char* why) { fail("quant format '", name, "': ", why); };
  if (name.substr(0, 3) != "int") bad("expected fp32, bf16 or int<bits>[.g<G>][.sym|.asym][.nearest|.stochastic]");
  QuantFormat f = quant_format_int(4);
  auto number = [&](std::string_view s) {
    int v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || p != s.data() + s.size()) bad("bad number");
    return v;
  };
  std::string_view rest = name.substr(3);
  for (bool first = true;; first = false) {
    const size_t dot = rest.find('.');
    const std::string_view tok = rest.substr(0, dot);
    if (first) f.bits = number(tok);
    else if (!tok.empty() && tok[0] == 'g') f.group = number(tok.substr(1));
    else if (tok == "sym") f.symmetric = true;
    else if (tok == "asym") f.symmetric = false;
    else if (tok == "nearest" || tok == "rn") f.rounding = QuantRounding::nearest;
    else if (tok == "stochastic" || tok == "sr") f.rounding = QuantRounding::stochastic;
    else bad("unknown field");
    if (dot == std::string_view::npos) break;
    rest = rest.substr(dot + 1);
  }
  quant_format_check(f);
  return f;
}

double quant_bits_per_value(const QuantFormat& f) {
  if (f.kind != QuantKind::int_group) return f.bits;
  return f.bits + (f.symmetric ? 16.0 : 48.0) / f.group;
}

size_t quant_row_groups(const QuantFormat& f, size_t cols) {
  return f.kind == QuantKind::int_group ? (cols + f.group - 1) / f.group : 0;
}

size_t quant_row_code_bytes(const QuantFormat& f, size_t cols) { return (cols * f.bits + 7) / 8; }

static size_t align_up(size_t n) { return (n + kQuantAlign - 1) / kQuantAlign * kQuantAlign; }

QuantLayout quant_layout(const QuantFormat& f, size_t rows, size_t cols) {
  quant_format_check(f);
  QuantLayout l{};
  l.code_bytes_per_row = quant_row_code_bytes(f, cols);
  l.groups_per_row = quant_row_groups(f, cols);
  const size_t groups = rows * l.groups_per_row;
  l.total_bytes = rows * l.code_bytes_per_row;
  l.scales_offset = l.mins_offset = l.total_bytes;
  if (groups) {
    l.scales_offset = align_up(l.total_bytes);
    l.total_bytes = l.mins_offset = l.scales_offset + groups * sizeof(uint16_t);
    if (!f.symmetric) {
      l.mins_offset = align_up(l.total_bytes);
      l.total_bytes = l.mins_offset + groups * sizeof(float);
    }
  }
  return l;
}

size_t quant_bytes(const QuantFormat& f, size_t rows, size_t cols) { return quant_layout(f, rows, cols).total_bytes; }

QuantView quant_view_at(const QuantFormat& f, const QuantLayout& l, uint8_t* base) {
  const bool groups = l.groups_per_row > 0;
  return {base, groups ? reinterpret_cast<uint16_t*>(base + l.scales_offset) : nullptr,
          groups && !f.symmetric ? reinterpret_cast<float*>(base + l.mins_offset) : nullptr};
}

QuantView quant_view_row(const QuantFormat& f, size_t cols, const QuantView& b, size_t row) {
  const size_t g = quant_row_groups(f, cols);
  return {b.codes ? b.codes + row * quant_row_code_bytes(f, cols) : nullptr, b.scales ? b.scales + row * g : nullptr,
          b.mins ? b.mins + row * g : nullptr};
}

QuantConstView quant_view_row(const QuantFormat& f, size_t cols, const QuantConstView& b, size_t row) {
  const size_t g = quant_row_groups(f, cols);
  return {b.codes ? b.codes + row * quant_row_code_bytes(f, cols) : nullptr, b.scales ? b.scales + row * g : nullptr,
          b.mins ? b.mins + row * g : nullptr};
}

}  // namespace agoq
