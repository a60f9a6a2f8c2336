// Attention's internals shared by its two paths (model/attention.h): attention.cpp's fp32 tile products and
// attention_bf16.cpp's bf16 ones use the same row loops, masks and transposes and the same grouped-query sum.
// Private to those two files.
#pragma once
#include <cstddef>
#include <cstdint>

#include "model/attention.h"

namespace agoq::attention_detail {

constexpr int kTile = kAttentionTile;

// ---- loops over one row of a tile (AVX-512 or AVX2 where the CPU has it, the same bits either way) ---------------
// Keys-major (forward): m[r] = max(m[r], s[r]).
void tile_max_accumulate(float* m, const float* s, int n);
float tile_dot(const float* a, const float* b, int n);
// dst (cols × rows, leading dimension ldd) = scale · src (rows × cols, leading dimension lds)ᵀ.
void tile_transpose(float* dst, ptrdiff_t ldd, const float* src, ptrdiff_t lds, int rows, int cols, float scale);

// The causal mask of a square diagonal tile of n × n (leading dimension ld), whose element (m, n) pairs key m with
// query n (keys-major) or query m with key n (queries-major): fill where the key comes after the query.
void tile_mask_keys_major(float* t, int ld, int n, float fill);
void tile_mask_queries_major(float* t, int ld, int n, float fill);
// The document mask of a tile of keys j0 … j0 + n_keys against queries whose documents start at doc_start[0 …
// n_queries): fill where the key lies before the query's document. Keys-major t (n_keys × n_queries), or
// queries-major (n_queries × n_keys), leading dimension ld.
void tile_mask_documents_keys_major(float* t, int ld, int n_keys, int n_queries, int j0, const int32_t* doc_start,
                                    float fill);
void tile_mask_documents_queries_major(float* t, int ld, int n_queries, int n_keys, int j0, const int32_t* doc_start,
                                       float fill);
// Keys-major: queries r of the tile skip keys [gaps[2r], gaps[2r+1]) (model/attention.h's shared contexts).
void tile_mask_gaps_keys_major(float* t, int ld, int n_keys, int n_queries, int j0, const int32_t* gaps, float fill);

void check_attention_shape(int B, int T, int H, int Hkv, int hd);

// ---- the backward's shared parts -----------------------------------------------------------------------------------
// attention_backward's arguments.
struct AttnGrad {
  float *dq, *dk, *dv;
  float *dk_heads, *dv_heads;  // grouped-query heads: (B, H, T, hd) each; else null
  const float *dout, *q, *k, *v, *o, *lse;
  const int32_t* doc_start;
  int T, H, Hkv, hd;
  float scale;
  ptrdiff_t ldq, ldk;
};
// Grouped-query heads' dk, dv, each head's own before the group's are summed: (B, H, T, hd) twice; none for MHA.
size_t head_grad_floats(int B, int T, int H, int Hkv, int hd);
// Where task (b, h) writes dk_j, dv_j: the kv head's rows (MHA), or the head's rows of the scratch (ld hd).
struct HeadGradRows {
  float *dk, *dv;
  ptrdiff_t ld;
};
HeadGradRows head_grad_rows(const AttnGrad& a, int b, int h);
// The end of the query tiles that key tile j0 (bc keys) meets: the first whose documents all start after it, or T.
int key_tile_query_end(const AttnGrad& a, int b, int j0, int bc);
// Grouped-query heads: dk, dv of kv head g = the sum of its heads' rows, in the order of the heads.
void backward_sum_heads(const AttnGrad& a, int B);

// ---- the bf16 path (attention_bf16.cpp) ----------------------------------------------------------------------------
size_t attention_bf16_scratch_bytes(int B, int T, int H, int Hkv, int hd, int n_threads);
void attention_bf16_forward(float* o, float* lse, const float* q, const float* k, const float* v, int B, int T, int H,
                            int Hkv, int hd, const int32_t* doc_start, const int32_t* gaps);
void attention_bf16_backward(const AttnGrad& a, int B);

}  // namespace agoq::attention_detail
