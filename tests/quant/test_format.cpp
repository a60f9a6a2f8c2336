// Format descriptors, byte layouts, fp16/bf16 conversions, Philox random bytes and stochastic rounding, and code
// packing.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/isa.h"
#include "core/rng.h"
#include "quant/format.h"
#include "quant/half.h"
#include "quant/simd.h"
#include "quant/tensor.h"
#include "tests/common/quant_kernels.h"
#if AGOQ_AVX2
#include <immintrin.h>
#endif

namespace agoq {

TEST(QuantFormat, BitsPerValueIncludeScaleOverhead) {
  EXPECT_DOUBLE_EQ(quant_bits_per_value(quant_format_int(4, 128, true)), 4.125);
  EXPECT_DOUBLE_EQ(quant_bits_per_value(quant_format_int(4, 128, false)), 4.375);  // fp16 scale + fp32 min
  EXPECT_DOUBLE_EQ(quant_bits_per_value(quant_format_int(3, 32, true)), 3.5);
  EXPECT_DOUBLE_EQ(quant_bits_per_value(quant_format_int(8, 256, true)), 8.0625);
  EXPECT_DOUBLE_EQ(quant_bits_per_value(quant_format_bf16()), 16.0);
  EXPECT_DOUBLE_EQ(quant_bits_per_value(quant_format_fp32()), 32.0);
}

TEST(QuantFormat, NamesRoundTripAndBadFormatsThrow) {
  for (int bits : {2, 3, 4, 8})
    for (int g : {32, 64, 128, 256})
      for (bool sym : {true, false})
        for (auto r : {QuantRounding::nearest, QuantRounding::stochastic}) {
          const QuantFormat f = quant_format_int(bits, g, sym, r);
          EXPECT_EQ(quant_format_parse(quant_format_name(f)), f) << quant_format_name(f);
        }
  EXPECT_EQ(quant_format_parse("int4"), quant_format_int(4));
  EXPECT_EQ(quant_format_parse("int3.asym.sr"), quant_format_int(3, 128, false, QuantRounding::stochastic));
  EXPECT_EQ(quant_format_parse("bf16"), quant_format_bf16());
  EXPECT_EQ(quant_format_name(quant_format_int(4, 64, false)), "int4.g64.asym.nearest");
  for (const char* bad : {"int5", "int4.g100", "int4.foo", "fp8", "int", "int4.g"})
    EXPECT_THROW(quant_format_parse(bad), Error) << bad;
  EXPECT_THROW(quant_bytes(quant_format_int(4, 48), 1, 1), Error);
  EXPECT_THROW(quant_bytes(QuantFormat{QuantKind::bf16, 16, 128, true, QuantRounding::stochastic}, 1, 1), Error);
}

TEST(QuantFormat, LayoutAndBytes) {
  // int3, G=128, 5 rows of 300: 3 groups per row, ceil(300*3/8) = 113 code bytes per row.
  const QuantFormat f = quant_format_int(3, 128, false);
  const QuantLayout l = quant_layout(f, 5, 300);
  EXPECT_EQ(l.code_bytes_per_row, 113u);
  EXPECT_EQ(l.groups_per_row, 3u);
  EXPECT_EQ(l.scales_offset, 576u);  // 565 rounded up to 64
  EXPECT_EQ(l.mins_offset, 640u);    // 576 + 30 -> 640
  EXPECT_EQ(l.total_bytes, 640u + 15 * 4);
  EXPECT_EQ(quant_bytes(quant_format_int(4), 4096, 4096), 4096u * 2048 + 4096 * 32 * 2);
  EXPECT_EQ(quant_bytes(quant_format_bf16(), 3, 5), 30u);
  EXPECT_EQ(quant_bytes(quant_format_fp32(), 3, 5), 60u);
  EXPECT_EQ(quant_bytes(quant_format_int(2), 0, 0), 0u);
  QuantizedTensor t(f, 5, 300, MemCategory::activations, "act.test");
  EXPECT_EQ(t.bytes(), l.total_bytes);
  EXPECT_EQ(reinterpret_cast<uint8_t*>(t.row(2).scales) - t.view().codes, 576 + 2 * 3 * 2);
  EXPECT_EQ(t.row(2).codes - t.view().codes, 226);
  EXPECT_EQ(reinterpret_cast<uint8_t*>(t.view().mins) - t.view().codes, 640);
  EXPECT_EQ(QuantizedTensor(quant_format_int(4), 2, 256, MemCategory::workspace).view().mins, nullptr);
}

TEST(QuantConvert, F16RoundUpMatchesF16cAndIsAnUpperBound) {
  std::vector<float> xs = {0.f,      1.f,           65504.f, 65504.5f, 65519.f,   65520.f, 1e9f,    0x1p-24f, 0x1p-25f,
                           0x1p-14f, 0x1.0004p-14f, 3e-8f,   1e-40f,   0x1p-149f, 0.1f,    1.f / 3, 2.f / 15};
  Rng rng(7);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::bit_cast<float>(rng.next_u32() & 0x7FFFFFFFu);
    if (!std::isnan(x)) xs.push_back(x);
  }
  for (float x : xs) {
    const uint16_t h = f32_to_f16_up(x);
    const float back = f16_to_f32(h);
    ASSERT_GE(back, x) << x;  // an upper bound ...
    if (h > 0 && h < 0x7C00) {
      ASSERT_LT(f16_to_f32(uint16_t(h - 1)), x) << x;  // ... and the least one
    }
#if AGOQ_AVX2
    const uint16_t ref = uint16_t(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(x), _MM_FROUND_TO_POS_INF), 0));
    ASSERT_EQ(h, ref) << x;
#endif
  }
  EXPECT_EQ(f32_to_f16_up(65504.f), 0x7BFF);
  EXPECT_EQ(f32_to_f16_up(65504.01f), 0x7C00);  // overflow -> Inf, reported by the caller
  EXPECT_EQ(f32_to_f16_up(1e-40f), 0x0001);
  EXPECT_EQ(f32_to_f16_up(NAN), 0x7E00);
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = f16_to_f32(uint16_t(h));
#if AGOQ_AVX2
    const float b = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(int(h))));
    ASSERT_EQ(std::bit_cast<uint32_t>(a), std::bit_cast<uint32_t>(b)) << h;
#endif
    if ((h & 0x7C00) != 0x7C00 && !(h & 0x8000)) {
      ASSERT_EQ(f32_to_f16_up(a), h) << h;  // exact values stay
    }
  }
}

// bf16 round to nearest even on known bit patterns, through both the SIMD and the scalar kernels.
TEST(QuantConvert, Bf16KnownValues) {
  struct Case {
    uint32_t in;
    uint16_t out;
  };
  const std::vector<Case> cases = {
      {0x3F800000, 0x3F80},  // 1.0
      {0x3F808000, 0x3F80},  // tie, even below: down
      {0x3F818000, 0x3F82},  // tie, odd below: up to even
      {0x3F808001, 0x3F81},  // above the tie
      {0x3F807FFF, 0x3F80},  // below the tie
      {0xBF818000, 0xBF82},  // negative tie
      {0x7F800000, 0x7F80},  // +Inf
      {0xFF800000, 0xFF80},  // -Inf
      {0x7FC00000, 0x7FC0},  // quiet NaN
      {0x7F800001, 0x7FC0},  // signalling NaN whose payload sits in the dropped bits: still a NaN
      {0xFF800001, 0xFFC0},  // negative NaN
      {0x7F7FFFFF, 0x7F80},  // FLT_MAX rounds to Inf under RNE
      {0x7F7F7FFF, 0x7F7F},  // just below: largest finite bf16
      {0x80000000, 0x8000},  // -0
      {0x00000001, 0x0000},  // smallest denormal
      {0x00018000, 0x0002},  // denormal tie to even
      {0x40490FDB, 0x4049},  // pi
  };
  for (QuantKernels simd : quant_kernels_here()) {
    quant_use_kernels(simd);
    std::vector<float> in;
    for (int rep = 0; rep < 3; ++rep)  // > 16 values so the vector loop runs
      for (const Case& c : cases) in.push_back(std::bit_cast<float>(c.in));
    QuantizedTensor t(quant_format_bf16(), 1, in.size(), MemCategory::workspace);
    const QuantStatus st = quant_encode(t, in.data(), {});
    EXPECT_EQ(st.nonfinite, 3u * 5);  // per rep: +-Inf and 3 NaNs (FLT_MAX is finite)
    const uint16_t* h = reinterpret_cast<const uint16_t*>(t.view().codes);
    for (size_t i = 0; i < in.size(); ++i)
      EXPECT_EQ(h[i], cases[i % cases.size()].out) << "case " << i << " simd " << simd;
    std::vector<float> back(in.size());
    quant_decode(t, back.data());
    for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(std::bit_cast<uint32_t>(back[i]), uint32_t(h[i]) << 16);
  }
  quant_use_default_kernels();
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.f);
}

TEST(QuantRandom, SimdChunksMatchScalarAndElementFormula) {
  const QuantSeed s{0x1234567890ABCDEFull, 42};
  for (uint64_t chunk : {uint64_t(0), uint64_t(5), (uint64_t(1) << 29) - 3, uint64_t(1) << 40}) {
    std::vector<uint8_t> a(kQuantRandomChunk * 7), b(a.size());
    quant_random_chunks_scalar(s, chunk, 7, a.data());
#if AGOQ_AVX2
    QuantRandomBytes simd(s, true);
    std::vector<uint8_t> tmp(b.size());
    const uint8_t* w = simd.get(chunk * kQuantRandomChunk, b.size(), tmp.data());
    std::copy(w, w + b.size(), b.begin());
    EXPECT_EQ(a, b) << chunk;
#endif
    if (quant_kernels_available(QuantKernels::avx512)) {  // the same bytes in the AVX-512 kernels' order
      quant_random_chunks_avx512(s, chunk, 7, b.data());
      for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(b[quant_random_slot512(i)], a[quant_random_slot(i)]) << chunk;
    }
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_EQ(a[quant_random_slot(i)], quant_random_byte_at(s, chunk * kQuantRandomChunk + i));
  }
  // The mapping itself: element i is byte i % 4 of word (i / 32) % 4 of Philox counter (i / 128) * 8 + rev3((i / 4)
  // % 8), rev3 reversing 3 bits; slots rotate bits 2-4 of the index right by one.
  const uint64_t rev3[8] = {0, 4, 2, 6, 1, 5, 3, 7};
  for (uint64_t i :
       {uint64_t(0), uint64_t(1), uint64_t(5), uint64_t(37), uint64_t(127), uint64_t(128), uint64_t(1000003)}) {
    const auto w = philox4x32(s.seed, s.tensor_id, (i / 128) * 8 + rev3[(i / 4) % 8]);
    EXPECT_EQ(quant_random_byte_at(s, i), uint8_t(w[(i / 32) % 4] >> (8 * (i % 4)))) << i;
    EXPECT_EQ(quant_uniform_at(s, i), (quant_random_byte_at(s, i) + 0.5f) / 256) << i;
  }
  const size_t slot_unit[8] = {0, 4, 1, 5, 2, 6, 3, 7};  // element unit (4 bytes) u of 32 -> its position
  for (size_t j = 0; j < 256; ++j) EXPECT_EQ(quant_random_slot(j), j / 32 * 32 + slot_unit[j / 4 % 8] * 4 + j % 4) << j;
  const size_t slot512_unit[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // the AVX-512 order: unit u at 2 (u % 4) + u / 4
  for (size_t j = 0; j < 256; ++j)
    EXPECT_EQ(quant_random_slot512(j), j / 32 * 32 + slot512_unit[j / 4 % 8] * 4 + j % 4) << j;
  // Another tensor id or seed gives other bytes.
  int same_id = 0, same_seed = 0;
  for (uint64_t i = 0; i < 256; ++i) {
    same_id += quant_random_byte_at(s, i) == quant_random_byte_at({s.seed, 43}, i);
    same_seed += quant_random_byte_at(s, i) == quant_random_byte_at({s.seed + 1, 42}, i);
  }
  EXPECT_LT(same_id, 10);
  EXPECT_LT(same_seed, 10);
}

// The sliding window returns the right bytes for any alignment, request size and look-ahead, walking forward (as
// the kernels do, sliding past its end), backward and far ahead; bytes kept by prepare() stay valid.
TEST(QuantRandom, WindowMatchesElementFormula) {
  const QuantSeed s{7, 3};
  for (QuantKernels k : quant_kernels_here()) {
    QuantRandomBytes rb(s, k != QuantKernels::scalar, k == QuantKernels::avx512);
    auto slot = [&](size_t j) { return quant_random_slot(rb.layout(), j); };
    Rng rng(1);
    uint64_t first = 1000003;
    for (int k = 0; k < 400; ++k) {
      const size_t n = 1 + rng.below(k % 3 == 0 ? 1024 : 200);
      const uint64_t ahead = first + n + rng.below(QuantRandomBytes::kMaxSpan - n + 1);
      rb.prepare(first, ahead);
      std::vector<uint8_t> tmp((std::max<size_t>(n, ahead - first) + 31) / 32 * 32);
      const uint8_t* r = rb.get(first, n, tmp.data());  // a block starting at first, aligned to 32 or not
      for (size_t j = 0; j < n; ++j)
        ASSERT_EQ(r[slot(j)], quant_random_byte_at(s, first + j)) << first << " " << j << " " << k;
      const uint8_t* all = rb.get(first, size_t(ahead - first), tmp.data());  // the look-ahead is there too
      for (size_t j = 0; j < ahead - first; ++j)
        ASSERT_EQ(all[slot(j)], quant_random_byte_at(s, first + j)) << first << " " << j << " " << k;
      first = k % 17 == 0 ? first - rng.below(3000) : k % 23 == 0 ? first + rng.below(1 << 20) : first + n;
    }
  }
  QuantRandomBytes rb(s, true);
  EXPECT_THROW(rb.prepare(0, QuantRandomBytes::kMaxSpan + 1), Error);
}

// The bytes are uniform: chi-square over 256 values (255 degrees of freedom: mean 255, sd 22.6) for 2^20
// consecutive elements, and for the elements sharing one byte position of their word (i % 4 = 2).
TEST(QuantRandom, BytesAreUniform) {
  const QuantSeed s{11, 0};
  const size_t n = size_t(1) << 20;
  std::vector<uint8_t> a(n);
  quant_random_chunks_scalar(s, 12345, n / kQuantRandomChunk, a.data());
  for (int pos : {-1, 2}) {
    std::vector<double> count(256, 0);
    double total = 0;
    for (size_t i = 0; i < n; ++i)
      if (pos < 0 || int(i % 4) == pos) ++count[a[i]], ++total;
    double chi2 = 0;
    for (double c : count) chi2 += (c - total / 256) * (c - total / 256) / (total / 256);
    EXPECT_LT(chi2, 255 + 6 * 22.6) << pos;
    EXPECT_GT(chi2, 255 - 6 * 22.6) << pos;
  }
}

// Stochastic rounding with 8-bit uniforms, exhaustively over the byte: for t = T / 256 the mean of
// quant_sr_round(T, byte) over the 256 bytes is exactly T / 256, the result is floor(t) or floor(t) + 1 and equals
// floor(t + (byte + 1/2) / 256); for an arbitrary real t (T = round(256 t)) the bias is |T / 256 - t| <= 1/512,
// and that bound is reached. The per-element error stays below one step: at most 511/512.
TEST(QuantRandom, StochasticRoundingBiasIsAtMostOne512thOfAStep) {
  for (int32_t T = -300 * 256; T <= 300 * 256; T += 7) {
    int64_t sum = 0;
    const double t = T / 256.0;
    for (int b = 0; b < 256; ++b) {
      const int32_t u = quant_sr_round(T, uint8_t(b));
      ASSERT_TRUE(u == std::floor(t) || u == std::floor(t) + 1) << T << " " << b;
      ASSERT_EQ(u, std::floor(t + (b + 0.5) / 256)) << T << " " << b;
      sum += u;
    }
    ASSERT_EQ(double(sum) / 256, t) << T;
  }
  double worst_bias = 0, worst_err = 0;
  Rng rng(5);
  for (int k = 0; k < 200000; ++k) {
    const float t = (rng.uniform() - 0.5f) * 600.f;
    const int32_t T = int32_t(std::nearbyint(256.f * t));
    worst_bias = std::max(worst_bias, std::fabs(T / 256.0 - t));
    for (uint8_t b : {uint8_t(0), uint8_t(255)})
      worst_err = std::max(worst_err, std::fabs(quant_sr_round(T, b) - double(t)));
  }
  EXPECT_LE(worst_bias, 1.0 / 512);
  EXPECT_GT(worst_bias, 0.99 / 512);  // the bound is tight: the bias is really there
  EXPECT_LE(worst_err, 511.0 / 512);
  EXPECT_GT(worst_err, 510.0 / 512);
}

// Every code value at every position of a pack unit (8 codes = b bytes), in a full unit (SIMD path) and in a row
// tail (scalar path), with a reference bit reader. Asymmetric with min 0 and max 2^b - 1 gives scale exactly 1,
// so code = value.
TEST(QuantPack, EveryCodeAtEveryPosition) {
  auto bit_field = [](const uint8_t* bytes, size_t pos, int bits) {
    uint32_t v = 0;
    for (int k = 0; k < bits; ++k) v |= uint32_t((bytes[(pos + k) / 8] >> ((pos + k) % 8)) & 1) << k;
    return v;
  };
  for (QuantKernels simd : quant_kernels_here()) {
    quant_use_kernels(simd);
    for (int bits : {2, 3, 4, 8}) {
      const int qmax = (1 << bits) - 1;
      const QuantFormat f = quant_format_int(bits, 32, false);
      for (size_t cols : {size_t(32), size_t(23)}) {  // 23: units of 8, 8 and a 7-code tail
        for (int v = 0; v <= qmax; ++v)
          for (size_t p = 0; p < cols; ++p) {
            std::vector<float> x(cols);
            for (size_t j = 0; j < cols; ++j) x[j] = float((j * 7 + v + 1) % (qmax + 1));
            x[p] = float(v);
            x[p == 0 ? 1 : 0] = 0.f, x[p == cols - 1 ? cols - 2 : cols - 1] = float(qmax);
            QuantizedTensor t(f, 1, cols, MemCategory::workspace);
            ASSERT_TRUE(quant_encode(t, x.data(), {}).ok());
            ASSERT_EQ(t.view().scales[0], 0x3C00);  // fp16 1.0
            ASSERT_EQ(t.view().mins[0], 0.f);
            const uint8_t* codes = t.view().codes;
            for (size_t j = 0; j < cols; ++j)
              ASSERT_EQ(bit_field(codes, j * bits, bits), uint32_t(x[j])) << bits << " " << j;
            for (size_t k = cols * bits; k < quant_row_code_bytes(f, cols) * 8; ++k)
              ASSERT_EQ(bit_field(codes, k, 1), 0u);  // padding bits are zero
            std::vector<float> back(cols);
            quant_decode(t, back.data());
            for (size_t j = 0; j < cols; ++j) ASSERT_EQ(back[j], x[j]);
          }
      }
    }
  }
  quant_use_default_kernels();
}

}  // namespace agoq
