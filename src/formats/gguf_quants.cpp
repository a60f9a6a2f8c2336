// Dequantization of GGML blocks (gguf_quants.h). Built with -ffp-contract=off (CMakeLists.txt): a product and a
// sum fused into one rounding would differ from the reference in the last bit.
#include "formats/gguf_quants.h"

#include <cstring>

#include "core/error.h"
#include "quant/half.h"

namespace agoq {

namespace {

constexpr uint32_t kQK = 256;  // values per K-quant super-block

struct TypeRow {
  uint32_t id;
  GgmlTypeInfo info;
};
// ggml.h's ggml_type ids and block sizes (gguf-py constants.GGML_QUANT_SIZES).
constexpr TypeRow kTypes[] = {
    {0, {"F32", 1, 4, true}},          {1, {"F16", 1, 2, true}},          {2, {"Q4_0", 32, 18, true}},
    {3, {"Q4_1", 32, 20, true}},       {6, {"Q5_0", 32, 22, true}},       {7, {"Q5_1", 32, 24, true}},
    {8, {"Q8_0", 32, 34, true}},       {9, {"Q8_1", 32, 40, false}},      {10, {"Q2_K", 256, 84, false}},
    {11, {"Q3_K", 256, 110, false}},   {12, {"Q4_K", 256, 144, true}},    {13, {"Q5_K", 256, 176, true}},
    {14, {"Q6_K", 256, 210, true}},    {15, {"Q8_K", 256, 292, false}},   {16, {"IQ2_XXS", 256, 66, false}},
    {17, {"IQ2_XS", 256, 74, false}},  {18, {"IQ3_XXS", 256, 98, false}}, {19, {"IQ1_S", 256, 50, false}},
    {20, {"IQ4_NL", 32, 18, false}},   {21, {"IQ3_S", 256, 110, false}},  {22, {"IQ2_S", 256, 82, false}},
    {23, {"IQ4_XS", 256, 136, false}}, {24, {"I8", 1, 1, false}},         {25, {"I16", 1, 2, false}},
    {26, {"I32", 1, 4, false}},        {27, {"I64", 1, 8, false}},        {28, {"F64", 1, 8, false}},
    {29, {"IQ1_M", 256, 56, false}},   {30, {"BF16", 1, 2, true}},        {31, {"Q4_0_4_4", 32, 18, false}},
    {32, {"Q4_0_4_8", 32, 18, false}}, {33, {"Q4_0_8_8", 32, 18, false}}, {34, {"TQ1_0", 256, 54, false}},
    {35, {"TQ2_0", 256, 66, false}},   {39, {"MXFP4", 32, 17, false}},
};

uint16_t le16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
uint32_t le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
float half_at(const uint8_t* p) { return f16_to_f32(le16(p)); }

void dequant_f32(const uint8_t* s, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = le32(s + 4 * i);
    std::memcpy(y + i, &u, 4);
  }
}
void dequant_f16(const uint8_t* s, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = half_at(s + 2 * i);
}
void dequant_bf16(const uint8_t* s, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = bf16_to_f32(le16(s + 2 * i));
}

void block_q8_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  for (int j = 0; j < 32; ++j) y[j] = float(int8_t(b[2 + j])) * d;
}
void block_q4_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  const uint8_t* q = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = float((q[j] & 0xF) - 8) * d;
    y[j + 16] = float((q[j] >> 4) - 8) * d;
  }
}
void block_q4_1(const uint8_t* b, float* y) {
  const float d = half_at(b), m = half_at(b + 2);
  const uint8_t* q = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = float(q[j] & 0xF) * d + m;
    y[j + 16] = float(q[j] >> 4) * d + m;
  }
}
// The fifth bit of value j (0..31) of a Q5 block: bit j of the little-endian uint32 qh.
void block_q5_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  const uint32_t qh = le32(b + 2);
  const uint8_t* q = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int lo = int((q[j] & 0xF) | (((qh >> j) & 1u) << 4)), hi = int((q[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
    y[j] = float(lo - 16) * d;
    y[j + 16] = float(hi - 16) * d;
  }
}
void block_q5_1(const uint8_t* b, float* y) {
  const float d = half_at(b), m = half_at(b + 2);
  const uint32_t qh = le32(b + 4);
  const uint8_t* q = b + 8;
  for (int j = 0; j < 16; ++j) {
    const uint32_t lo = (q[j] & 0xF) | (((qh >> j) & 1u) << 4), hi = (q[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4);
    y[j] = float(lo) * d + m;
    y[j + 16] = float(hi) * d + m;
  }
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K super-block: sub-blocks 0..3 in the low six bits of
// bytes j and j+4; 4..7 in the nibbles of byte j+4 with their top two bits in the top bits of bytes j-4 and j.
void k_scale_min(const uint8_t* s, int j, uint8_t& sc, uint8_t& m) {
  if (j < 4) {
    sc = s[j] & 63, m = s[j + 4] & 63;
  } else {
    sc = uint8_t((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
    m = uint8_t((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}
// Q4_K (qh null) and Q5_K: sub-block 2g takes the low nibbles of bytes 32g..32g+31, 2g+1 their high nibbles.
void block_k45(const uint8_t* b, const uint8_t* qh, const uint8_t* q, float* y) {
  const float d = half_at(b), dmin = half_at(b + 2);
  const uint8_t* scales = b + 4;
  for (int s = 0; s < 8; ++s) {
    uint8_t sc, m;
    k_scale_min(scales, s, sc, m);
    const float ds = d * float(sc), dm = dmin * float(m);
    const uint8_t* g = q + 32 * (s / 2);
    for (int l = 0; l < 32; ++l) {
      uint32_t v = (s & 1) ? g[l] >> 4 : g[l] & 0xF;
      if (qh) v |= ((qh[l] >> s) & 1u) << 4;
      y[32 * s + l] = ds * float(v) - dm;
    }
  }
}
void block_q4_k(const uint8_t* b, float* y) { block_k45(b, nullptr, b + 16, y); }
void block_q5_k(const uint8_t* b, float* y) { block_k45(b, b + 16, b + 48, y); }
// Q6_K: each half of 128 values reads 64 bytes of ql, 32 of qh and 8 scales (one per 16 values). Quarter k (0..3)
// of a half: value l takes the low (k < 2) or high nibble of ql[l + 32*(k&1)] and bits 2k, 2k+1 of qh[l].
void block_q6_k(const uint8_t* b, float* y) {
  const float d = half_at(b + 208);
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b + 64 * h;
    const uint8_t* qh = b + 128 + 32 * h;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * h;
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 32; ++l) {
        const uint8_t lo = (k < 2) ? ql[l + 32 * (k & 1)] & 0xF : ql[l + 32 * (k & 1)] >> 4;
        const int q = int(lo | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
        y[128 * h + 32 * k + l] = d * float(sc[2 * k + l / 16]) * float(q);
      }
  }
}

void dequant_blocks(void (*block)(const uint8_t*, float*), uint32_t qk, uint32_t bytes, const uint8_t* s, float* y,
                    size_t n) {
  for (size_t i = 0; i < n / qk; ++i) block(s + i * bytes, y + i * qk);
}

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t id) {
  for (const TypeRow& r : kTypes)
    if (r.id == id) return &r.info;
  return nullptr;
}

std::string ggml_type_name(uint32_t id) {
  const GgmlTypeInfo* t = ggml_type_info(id);
  return t ? t->name : "type " + std::to_string(id);
}

std::string ggml_types_supported() {
  std::string s;
  for (const TypeRow& r : kTypes)
    if (r.info.dequantizable) s += (s.empty() ? "" : ", ") + std::string(r.info.name);
  return s;
}

void gguf_dequantize(uint32_t type, const void* src, float* dst, size_t n) {
  const GgmlTypeInfo* t = ggml_type_info(type);
  AGOQ_CHECK(t && t->dequantizable, "GGUF tensor type ", ggml_type_name(type), " is not supported (agoq reads ",
             ggml_types_supported(), ")");
  AGOQ_CHECK(n % t->block == 0, "GGUF ", t->name, ": ", n, " values are not a whole number of ", t->block,
             "-value blocks");
  const auto* s = static_cast<const uint8_t*>(src);
  switch (GgmlType(type)) {
    case GgmlType::F32: return dequant_f32(s, dst, n);
    case GgmlType::F16: return dequant_f16(s, dst, n);
    case GgmlType::BF16: return dequant_bf16(s, dst, n);
    case GgmlType::Q8_0: return dequant_blocks(block_q8_0, 32, 34, s, dst, n);
    case GgmlType::Q4_0: return dequant_blocks(block_q4_0, 32, 18, s, dst, n);
    case GgmlType::Q4_1: return dequant_blocks(block_q4_1, 32, 20, s, dst, n);
    case GgmlType::Q5_0: return dequant_blocks(block_q5_0, 32, 22, s, dst, n);
    case GgmlType::Q5_1: return dequant_blocks(block_q5_1, 32, 24, s, dst, n);
    case GgmlType::Q4_K: return dequant_blocks(block_q4_k, kQK, 144, s, dst, n);
    case GgmlType::Q5_K: return dequant_blocks(block_q5_k, kQK, 176, s, dst, n);
    case GgmlType::Q6_K: return dequant_blocks(block_q6_k, kQK, 210, s, dst, n);
  }
  fail("GGUF tensor type ", t->name, " has no decoder");  // unreachable: the table and the switch agree
}

}  // namespace agoq
