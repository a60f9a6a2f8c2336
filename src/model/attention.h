// Causal multi-head attention with grouped-query heads, memory-efficient (FlashAttention-2 style): the scores are
// processed in kAttentionTile × kAttentionTile tiles with an online softmax; only o and the log-sum-exp (lse) of
// each query row are saved, no T×T buffer ever exists, and the backward recomputes the probabilities per tile
// from lse. Scale 1/sqrt(hd).
//
// Layouts (fp32, row-major): q (B, T, H, hd); k, v (B, T, Hkv, hd); o (B, T, H, hd); lse (B, H, T), natural log of
// the sum of exp of the scaled scores. Head h reads kv head h / (H / Hkv); H must be a multiple of Hkv.
// Scratch: per thread a few tiles (at most 2·64·64 + 7·64·hd floats, independent of T), and in the backward of
// grouped-query heads each head's dk, dv before the group's sum (2·B·T·H·hd floats); Buffers (MemCategory::workspace)
// of the call.
//
// Precision (`--compute`): fp32, or the tile products on bf16 inputs with fp32 accumulation (model/tile_bf16.h:
// AMX-BF16 or AVX512-BF16 where the CPU has them), as FlashAttention-2 computes on a GPU: q, k, v, dout and the
// probabilities P and dS are rounded to bf16 (nearest even) where a product reads them; the softmax statistics (max,
// sum, lse), D = rowsum(dout ∘ o), the scale and every accumulation stay fp32. Scale is applied to the fp32 scores.
// Its scratch adds bf16 copies of k, v (forward) and of one head's q, dout per thread (backward).
//
// Document masking (examples packed into one sequence): doc_start (B, T), or null, gives each row the position in
// its sequence where its document begins; query i then sees keys [doc_start_i, i] only, so no attention crosses an
// example's boundary. Documents are contiguous: 0 ≤ doc_start_i ≤ i, never decreasing along a sequence, and
// doc_start_i = i or doc_start_{i-1}. Null is one document per sequence (doc_start_i = 0).
//
// Shared contexts (scoring several continuations of one context in one pass, evaltask/task_score.cpp): gaps
// (B, T, 2), or null, gives each row keys [gaps_2i, gaps_2i+1) of its document that it does not see, the other
// continuations packed between the context and its own. Forward only; RoPE gives such a row the position
// i − (gaps_2i+1 − gaps_2i), so the context and its continuation sit as in a pass of their own.
#pragma once
#include <cstddef>
#include <cstdint>

#include "model/gemm_bf16.h"

namespace agoq {

constexpr int kAttentionTile = 64;

// Bytes of the larger of the two calls' scratch on n_threads threads (what a memory plan reserves for attention):
// the threads' tiles, and for grouped-query heads the backward's per-head dk, dv (2·B·T·H·hd floats).
size_t attention_scratch_bytes(int B, int T, int H, int Hkv, int hd, int n_threads,
                               GemmPrecision precision = GemmPrecision::fp32);

// o, lse OVERWRITE. Parallel over (batch, head, query tile).
void attention_forward(float* o, float* lse, const float* q, const float* k, const float* v, int B, int T, int H,
                       int Hkv, int hd, const int32_t* doc_start = nullptr,
                       GemmPrecision precision = GemmPrecision::fp32, const int32_t* gaps = nullptr);
// dq (B, T, H, hd), dk, dv (B, T, Hkv, hd) OVERWRITE; for GQA dk, dv sum over the heads that share a kv head.
// Parallel over (batch, head); grouped-query heads' dk, dv are summed over the group afterwards, in the order of the
// heads, so the result is the same for any thread count.
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* o, const float* lse, int B, int T, int H, int Hkv, int hd,
                        const int32_t* doc_start = nullptr, GemmPrecision precision = GemmPrecision::fp32);
// The instruction set of the fp32 tile products: AVX-512 where the CPU has it, else AVX2. Both give the same bits (the
// same fused multiply-add per element, in the same order); attention_isa_cap lowers it, for the test that says so.
enum class AttentionIsa { avx2, avx512 };
AttentionIsa attention_isa();
void attention_isa_cap(AttentionIsa cap);

// Throws unless doc_start (B, T) describes contiguous documents as above (the ops trust it), and each gap (when
// gaps is not null) lies inside its row's document before the row.
void attention_check_doc_start(const int32_t* doc_start, int B, int T, const int32_t* gaps = nullptr);

}  // namespace agoq
