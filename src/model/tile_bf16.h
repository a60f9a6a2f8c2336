// Small bf16 matrix products for attention's tiles (model/attention.h with bf16 compute): inputs in bf16, products
// accumulated in fp32. Three kernels give the same sums up to the order of the fp32 additions: AMX-BF16 (tile
// registers, 16 x 16 outputs an instruction), AVX512-BF16 (vdpbf16ps, one pair of k a lane) and their scalar twin,
// chosen at run time by what the CPU has; tile_bf16_isa_cap lowers the choice, for the tests that compare them.
//
// Operands (row-major):
//   A (M x K) bf16, leading dimension lda values: k runs along a row, so a lane reads the pair (2k', 2k'+1) as one
//     32-bit word;
//   B (K x N) as pairs ("VNNI"): Bp[k'][n] = (B(2k', n), B(2k'+1, n)), a 32-bit word each, leading dimension ldb words;
//   C (M x N) fp32, leading dimension ldc floats.
// Shapes: M, N, K multiples of 32 (attention pads its tiles and head dimension to that).
#pragma once
#include <cstddef>
#include <cstdint>

namespace agoq {

enum class TileBf16Isa : uint8_t { scalar, avx512_bf16, amx };
TileBf16Isa tile_bf16_isa();  // the best this CPU (and the OS: AMX needs its permission) has, under the cap
void tile_bf16_isa_cap(TileBf16Isa cap);
const char* tile_bf16_isa_name(TileBf16Isa isa);

// The tile registers' configuration, loaded for the calling thread while this lives (AMX only; other code on the
// thread, oneDNN's GEMMs included, loads its own). One per thread, around its products.
class TileBf16Thread {
 public:
  TileBf16Thread();
  ~TileBf16Thread();
  TileBf16Thread(const TileBf16Thread&) = delete;
  TileBf16Thread& operator=(const TileBf16Thread&) = delete;

 private:
  bool amx_;
};

// C = A · B, or C += A · B when accumulate.
void tile_bf16_gemm(int M, int N, int K, const uint16_t* A, int lda, const uint32_t* Bp, int ldb, float* C, int ldc,
                    bool accumulate);

// ---- packing fp32 into the operands (round to nearest even, quant/half.h's f32_to_bf16); the parts of the
// destination past the source's rows or columns are zeroed, so a tile pads with zeros -------------------------------

// A operand: dst (dst_rows x dst_cols, leading dimension dst_cols) = src (rows x cols, leading dimension lds).
void tile_bf16_pack_rows(uint16_t* dst, int dst_rows, int dst_cols, const float* src, ptrdiff_t lds, int rows,
                         int cols);
// A operand of a transposed source: dst (dst_rows x dst_cols) = srcᵀ, src (rows x cols, lds): dst(c, r) = src(r, c).
void tile_bf16_pack_transposed(uint16_t* dst, int dst_rows, int dst_cols, const float* src, ptrdiff_t lds, int rows,
                               int cols);
// B operand whose k runs down the source's rows: dst (dst_rows/2 x dst_cols words) = pairs of src's rows,
// dst[k'][n] = (src(2k', n), src(2k'+1, n)).
void tile_bf16_pack_row_pairs(uint32_t* dst, int dst_rows, int dst_cols, const float* src, ptrdiff_t lds, int rows,
                              int cols);
// B operand whose k runs along the source's rows (the product with srcᵀ): dst (dst_rows/2 x dst_cols words),
// dst[k'][n] = (src(n, 2k'), src(n, 2k'+1)); dst_rows is the padded length of src's rows.
void tile_bf16_pack_col_pairs(uint32_t* dst, int dst_rows, int dst_cols, const float* src, ptrdiff_t lds, int rows,
                              int cols);

// ---- attention's softmax written straight into its operands (one pass instead of the loop and a packing) --------
// Keys-major scores s (rows x cols, lds): dst (dst_rows/2 x dst_cols words) = pairs of rows of
// e(r, c) = exp(s(r, c) − bias[c]) (opmath's op_exp), and sum[c] += e(r, c) row after row: P̃ for Oᵀ += Ṽᵀ · P̃.
void tile_bf16_pack_exp_pairs(uint32_t* dst, int dst_rows, int dst_cols, const float* s, ptrdiff_t lds, int rows,
                              int cols, const float* bias, float* sum);
// Queries-major scores s and dP (rows x cols, lds each): p(r, c) = exp(s(r, c) − lse[r]), ds = p · (dP(r, c) − D[r]),
// written as pairs of rows of p (p_pairs) and of ds (ds_pairs), both dst_rows/2 x dst_cols words, and as rows of ds
// (ds_rows, dst_rows x dst_cols): P̃ and dS̃ for dVᵀ, dKᵀ and dq.
void tile_bf16_pack_softmax_grad(uint32_t* p_pairs, uint32_t* ds_pairs, uint16_t* ds_rows, int dst_rows, int dst_cols,
                                 const float* s, const float* dp, ptrdiff_t lds, int rows, int cols, const float* lse,
                                 const float* D);

}  // namespace agoq
