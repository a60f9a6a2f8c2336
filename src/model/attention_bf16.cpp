// Flash attention with bf16 tile products (model/attention.h, precision bf16): the fp32 path's tiles, softmax and
// masks (attention_tiles.h), with every product a model/tile_bf16.h one on tiles padded to whole 32-wide blocks
// (tile kTile, head dimension hp = hd rounded up to 32; the padding is zeros, and the rows and columns it adds are
// never read back). Layouts are chosen so no operand needs a transpose inside the loops:
//   Forward (keys-major, as the fp32 path): St (keys x queries) = K̃_j · Q̃_iᵀ and Oᵀ (hp x queries) += Ṽ_jᵀ · P̃, with
//   K̃ and Ṽᵀ packed once per kv head before the tasks and Q̃_iᵀ once per task.
//   Backward (queries-major): S = Q̃_i · K̃_jᵀ, dP = dÕ_i · Ṽ_jᵀ, dVᵀ_j += dÕ_iᵀ · P̃, dKᵀ_j += Q̃_iᵀ · dS̃, dq_i +=
//   scale · dS̃ · K̃_j, with the head's Q̃, Q̃ᵀ, dÕ, dÕᵀ packed once per task and K̃_j, Ṽ_j's pairs once per key tile.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "core/memory.h"
#include "model/attention_tiles.h"
#include "model/tile_bf16.h"
#include "opmath/op_math.h"

namespace agoq::attention_detail {
namespace {

int round_up(int x, int m) { return (x + m - 1) / m * m; }

// One thread's scratch, in three arrays by element type: sizes in elements.
struct Bf16Parts {
  size_t floats, halves, words;
  size_t bytes() const { return floats * 4 + halves * 2 + words * 4; }
};
// Forward per thread: St (t x t), Oᵀ (hp x t), m, m_new, l, corr (t) floats; Q̃ᵀ pairs (hp/2 x t), P̃ pairs (t/2 x t).
Bf16Parts forward_parts(int hp) {
  const size_t t = kTile, h = size_t(hp);
  return {t * t + h * t + 4 * t, 0, h / 2 * t + t / 2 * t};
}
// Backward per thread: S, dS (t x t), dKᵀ, dVᵀ (hp x t), the head's dq / scale (Tp x hp) and D (Tp) floats; the head's
// Q̃, Q̃ᵀ, dÕ, dÕᵀ (Tp x hp each) and dS̃ (t x t) halves; K̃ᵀ, Ṽᵀ pairs (hp/2 x t), K̃ pairs (t/2 x hp), P̃, dS̃ pairs (t/2 x
// t) words.
Bf16Parts backward_parts(int Tp, int hp) {
  const size_t t = kTile, h = size_t(hp);
  return {2 * t * t + 2 * h * t + size_t(Tp) * (h + 1), 4 * size_t(Tp) * h + t * t,
          2 * (h / 2) * t + t / 2 * h + 2 * (t / 2) * t};
}
// The forward's bf16 copies of each (b, kv head)'s k (Tp x hp) and vᵀ (hp x Tp): 2 x Tp x hp halves a kv head.
size_t forward_kv_halves(int B, int Tp, int Hkv, int hp) { return 2 * size_t(B) * Hkv * Tp * hp; }

// A thread's part of the three arrays, handed out in order.
class Carve {
 public:
  Carve(float* f, uint16_t* h, uint32_t* w) : f_(f), h_(h), w_(w) {}
  float* floats(size_t n) { return std::exchange(f_, f_ + n); }
  uint16_t* halves(size_t n) { return std::exchange(h_, h_ + n); }
  uint32_t* words(size_t n) { return std::exchange(w_, w_ + n); }

 private:
  float* f_;
  uint16_t* h_;
  uint32_t* w_;
};

// The three arrays of n_threads threads' parts.
struct Bf16Scratch {
  Buffer<float> floats;
  Buffer<uint16_t> halves;
  Buffer<uint32_t> words;
  Bf16Parts per_thread;
  Bf16Scratch(const Bf16Parts& p, int n_threads)
      : floats(p.floats * n_threads, MemCategory::workspace, "attention.scratch"),
        halves(p.halves * n_threads, MemCategory::workspace, "attention.scratch_bf16"),
        words(p.words * n_threads, MemCategory::workspace, "attention.scratch_bf16_pairs"),
        per_thread(p) {}
  Carve thread(int i) {
    return Carve(floats.data() + per_thread.floats * i, halves.data() + per_thread.halves * i,
                 words.data() + per_thread.words * i);
  }
};

void scale_rows(float* t, int ld, int rows, int cols, float scale) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) t[r * ld + c] *= scale;
}
// t(r, c) *= scale[c] for r < rows, c < cols (Oᵀ's columns are queries).
void scale_columns(float* t, int ld, int rows, int cols, const float* scale) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) t[r * ld + c] *= scale[c];
}

}  // namespace

size_t attention_bf16_scratch_bytes(int B, int T, int H, int Hkv, int hd, int n_threads) {
  const int Tp = round_up(T, kTile), hp = round_up(hd, 32);
  const size_t fwd = forward_kv_halves(B, Tp, Hkv, hp) * 2 + forward_parts(hp).bytes() * n_threads;
  const size_t bwd = backward_parts(Tp, hp).bytes() * n_threads + head_grad_floats(B, T, H, Hkv, hd) * sizeof(float);
  return std::max(fwd, bwd);
}

// ---------------------------------------------------------------------------------------------------------------
// Forward: one task = (b, h, query tile i), as the fp32 path's.
void attention_bf16_forward(float* o, float* lse, const float* q, const float* k, const float* v, int B, int T, int H,
                            int Hkv, int hd, const int32_t* doc_start, const int32_t* gaps) {
  const int group = H / Hkv, n_tiles = (T + kTile - 1) / kTile, Tp = n_tiles * kTile, hp = round_up(hd, 32);
  const float scale = 1.0f / std::sqrt(float(hd)), inf = std::numeric_limits<float>::infinity();
  const float no_max = std::numeric_limits<float>::lowest();  // see the fp32 forward
  const ptrdiff_t ldq = ptrdiff_t(H) * hd, ldk = ptrdiff_t(Hkv) * hd;
  const size_t kv_head = size_t(Tp) * hp;

  // K̃ (Tp x hp) and Ṽᵀ (hp x Tp) of each (b, kv head).
  Buffer<uint16_t> kv(forward_kv_halves(B, Tp, Hkv, hp), MemCategory::workspace, "attention.kv_bf16");
  uint16_t *const K16 = kv.data(), *const Vt16 = kv.data() + size_t(B) * Hkv * kv_head;
#pragma omp parallel for schedule(static)
  for (int bg = 0; bg < B * Hkv; ++bg) {
    const size_t src = (size_t(bg / Hkv) * T * Hkv + bg % Hkv) * hd;
    tile_bf16_pack_rows(K16 + bg * kv_head, Tp, hp, k + src, ldk, T, hd);
    tile_bf16_pack_transposed(Vt16 + bg * kv_head, hp, Tp, v + src, ldk, T, hd);
  }

  const int n_threads = omp_get_max_threads();
  Bf16Scratch scratch(forward_parts(hp), n_threads);
  const int n_tasks = B * H * n_tiles;
#pragma omp parallel num_threads(n_threads)
  {
    const TileBf16Thread tiles;
    Carve c = scratch.thread(omp_get_thread_num());
    float *const St = c.floats(kTile * kTile), *const Ot = c.floats(size_t(hp) * kTile), *const m = c.floats(kTile),
                 *const m_new = c.floats(kTile), *const l = c.floats(kTile), *const corr = c.floats(kTile);
    uint32_t *const Qp = c.words(size_t(hp / 2) * kTile), *const Pp = c.words(kTile / 2 * kTile);
#pragma omp for schedule(dynamic, 1)
    for (int task = 0; task < n_tasks; ++task) {
      const int bh = task / n_tiles, it = n_tiles - 1 - task % n_tiles, b = bh / H, h = bh % H;
      const int i0 = it * kTile, br = std::min(kTile, T - i0), bg = b * Hkv + h / group;
      const float* qh = q + (size_t(b) * T * H + h) * hd;
      const int32_t* ds = doc_start ? doc_start + size_t(b) * T + i0 : nullptr;
      const int first_key = ds ? ds[0] / kTile * kTile : 0, last_start = ds ? ds[br - 1] : 0;
      const int32_t* gp = gaps ? gaps + 2 * (size_t(b) * T + i0) : nullptr;  // the tile's gaps

      tile_bf16_pack_col_pairs(Qp, hp, kTile, qh + i0 * ldq, ldq, br, hd);
      std::fill(m, m + br, no_max);
      std::fill(l, l + br, 0.0f);
      std::fill(Ot, Ot + size_t(hp) * kTile, 0.0f);
      for (int j0 = first_key; j0 <= i0; j0 += kTile) {
        const int bc = std::min(kTile, T - j0);
        const bool diag = j0 == i0;
        tile_bf16_gemm(kTile, kTile, hp, K16 + bg * kv_head + size_t(j0) * hp, hp, Qp, kTile, St, kTile, false);
        scale_rows(St, kTile, bc, br, scale);
        if (diag) tile_mask_keys_major(St, kTile, br, -inf);
        if (j0 < last_start) tile_mask_documents_keys_major(St, kTile, bc, br, j0, ds, -inf);
        if (gp) tile_mask_gaps_keys_major(St, kTile, bc, br, j0, gp, -inf);
        std::copy(m, m + br, m_new);
        for (int r = 0; r < bc; ++r) tile_max_accumulate(m_new, St + r * kTile, br);
        for (int r = 0; r < br; ++r) corr[r] = op_exp(m[r] - m_new[r]), l[r] *= corr[r];
        tile_bf16_pack_exp_pairs(Pp, kTile, kTile, St, kTile, bc, br, m_new, l);
        if (j0 > first_key) scale_columns(Ot, kTile, hd, br, corr);
        tile_bf16_gemm(hp, kTile, kTile, Vt16 + bg * kv_head + j0, Tp, Pp, kTile, Ot, kTile, true);
        std::copy(m_new, m_new + br, m);
      }
      float* lse_h = lse + (size_t(b) * H + h) * T;
      for (int r = 0; r < br; ++r) corr[r] = 1.0f / l[r], lse_h[i0 + r] = m[r] + std::log(l[r]);
      scale_columns(Ot, kTile, hd, br, corr);
      tile_transpose(o + (size_t(b) * T * H + h) * hd + i0 * ldq, ldq, Ot, kTile, hd, br, 1.0f);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Backward: one task = (b, head h), key tile outer, query tiles inner, as the fp32 path's.
namespace {

// One thread's arrays (backward_parts) and the shapes they are padded to.
struct Bf16GradTiles {
  int Tp, hp;
  float *S, *dS, *dKt, *dVt, *dq, *D;
  uint16_t *Q16, *Qt16, *dO16, *dOt16, *dS16;
  uint32_t *Kp, *Vp, *Kr, *Pp, *dSp;

  Bf16GradTiles(Carve c, int Tp_, int hp_) : Tp(Tp_), hp(hp_) {
    const size_t t = kTile, h = size_t(hp);
    S = c.floats(t * t), dS = c.floats(t * t), dKt = c.floats(h * t), dVt = c.floats(h * t),
    dq = c.floats(size_t(Tp) * h);
    D = c.floats(size_t(Tp));
    Q16 = c.halves(size_t(Tp) * h), Qt16 = c.halves(size_t(Tp) * h), dO16 = c.halves(size_t(Tp) * h);
    dOt16 = c.halves(size_t(Tp) * h), dS16 = c.halves(t * t);
    Kp = c.words(h / 2 * t), Vp = c.words(h / 2 * t), Kr = c.words(t / 2 * h), Pp = c.words(t / 2 * t);
    dSp = c.words(t / 2 * t);
  }
};

// Query tile i0 of head h against key tile j0 (bc keys, packed in t.Kp, t.Vp, t.Kr): adds into t.dKt, t.dVt and
// the tile's rows of t.dq.
void bf16_query_tile(const AttnGrad& a, const Bf16GradTiles& t, int b, int h, int i0, int j0, int bc) {
  const int T = a.T, hp = t.hp, br = std::min(kTile, T - i0);
  const float* lse_h = a.lse + (size_t(b) * a.H + h) * T;
  const bool diag = i0 == j0;
  const float inf = std::numeric_limits<float>::infinity();
  const int32_t* ds = a.doc_start ? a.doc_start + size_t(b) * T + i0 : nullptr;
  tile_bf16_gemm(kTile, kTile, hp, t.Q16 + size_t(i0) * hp, hp, t.Kp, kTile, t.S, kTile, false);
  tile_bf16_gemm(kTile, kTile, hp, t.dO16 + size_t(i0) * hp, hp, t.Vp, kTile, t.dS, kTile, false);
  // Masked scores are −inf before the softmax, so their p and ds come out 0.
  scale_rows(t.S, kTile, br, bc, a.scale);
  if (diag) tile_mask_queries_major(t.S, kTile, br, -inf);
  if (ds && j0 < ds[br - 1]) tile_mask_documents_queries_major(t.S, kTile, br, bc, j0, ds, -inf);
  tile_bf16_pack_softmax_grad(t.Pp, t.dSp, t.dS16, kTile, kTile, t.S, t.dS, kTile, br, bc, lse_h + i0, t.D + i0);
  tile_bf16_gemm(hp, kTile, kTile, t.dOt16 + i0, t.Tp, t.Pp, kTile, t.dVt, kTile, true);
  tile_bf16_gemm(hp, kTile, kTile, t.Qt16 + i0, t.Tp, t.dSp, kTile, t.dKt, kTile, true);
  tile_bf16_gemm(kTile, hp, kTile, t.dS16, kTile, t.Kr, hp, t.dq + size_t(i0) * hp, hp, true);
}

void bf16_backward_task(const AttnGrad& a, const Bf16GradTiles& t, int b, int h) {
  const int T = a.T, hd = a.hd, hp = t.hp, Tp = t.Tp;
  const size_t head = (size_t(b) * T * a.H + h) * hd, kv_head = (size_t(b) * T * a.Hkv + h / (a.H / a.Hkv)) * hd;
  const float *kh = a.k + kv_head, *vh = a.v + kv_head;
  const HeadGradRows out = head_grad_rows(a, b, h);
  std::fill(t.dq, t.dq + size_t(Tp) * hp, 0.0f);
  tile_bf16_pack_rows(t.Q16, Tp, hp, a.q + head, a.ldq, T, hd);
  tile_bf16_pack_transposed(t.Qt16, hp, Tp, a.q + head, a.ldq, T, hd);
  tile_bf16_pack_rows(t.dO16, Tp, hp, a.dout + head, a.ldq, T, hd);
  tile_bf16_pack_transposed(t.dOt16, hp, Tp, a.dout + head, a.ldq, T, hd);
  for (int i = 0; i < T; ++i) t.D[i] = tile_dot(a.dout + head + i * a.ldq, a.o + head + i * a.ldq, hd);
  for (int j0 = 0; j0 < T; j0 += kTile) {
    const int bc = std::min(kTile, T - j0);
    tile_bf16_pack_col_pairs(t.Kp, hp, kTile, kh + j0 * a.ldk, a.ldk, bc, hd);
    tile_bf16_pack_col_pairs(t.Vp, hp, kTile, vh + j0 * a.ldk, a.ldk, bc, hd);
    tile_bf16_pack_row_pairs(t.Kr, kTile, hp, kh + j0 * a.ldk, a.ldk, bc, hd);
    std::fill(t.dKt, t.dKt + size_t(hp) * kTile, 0.0f);
    std::fill(t.dVt, t.dVt + size_t(hp) * kTile, 0.0f);
    const int i_end = key_tile_query_end(a, b, j0, bc);
    for (int i0 = j0; i0 < i_end; i0 += kTile) bf16_query_tile(a, t, b, h, i0, j0, bc);
    tile_transpose(out.dk + j0 * out.ld, out.ld, t.dKt, kTile, hd, bc, a.scale);
    tile_transpose(out.dv + j0 * out.ld, out.ld, t.dVt, kTile, hd, bc, 1.0f);
  }
  for (int i = 0; i < T; ++i)
    for (int d = 0; d < hd; ++d) a.dq[head + i * a.ldq + d] = a.scale * t.dq[size_t(i) * hp + d];
}

}  // namespace

void attention_bf16_backward(const AttnGrad& a, int B) {
  const int Tp = round_up(a.T, kTile), hp = round_up(a.hd, 32), n_threads = omp_get_max_threads();
  Bf16Scratch scratch(backward_parts(Tp, hp), n_threads);
  const int n_tasks = B * a.H;
#pragma omp parallel num_threads(n_threads)
  {
    const TileBf16Thread tiles;
    const Bf16GradTiles t(scratch.thread(omp_get_thread_num()), Tp, hp);
#pragma omp for schedule(dynamic, 1)
    for (int task = 0; task < n_tasks; ++task) bf16_backward_task(a, t, task / a.H, task % a.H);
  }
}

}  // namespace agoq::attention_detail
