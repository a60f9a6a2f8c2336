#include "plan/memory_model.h"

#include <omp.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "comm/allreduce_q8.h"
#include "core/error.h"
#include "model/act_store_cpu.h"
#include "model/attention.h"
#include "model/llama.h"
#include "parallel/grad_reduce.h"
#include "parallel/grad_store.h"
#include "quant/grad_q8.h"

namespace agoq {

namespace {

size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

// Per-rank widths after tensor parallelism. With fewer kv heads than T ranks, Megatron replicates kv heads, so a
// rank still holds one.
struct TpShape {
  size_t d, ct, kvt, ft, ht, vt;
};
TpShape tp_shape(const LlamaConfig& cfg, int tp, int vocab_padded) {
  const size_t hd = size_t(cfg.head_dim());
  return {size_t(cfg.dim),          size_t(cfg.dim / tp),     size_t(std::max(1, cfg.n_kv_heads / tp)) * hd,
          size_t(cfg.ffn_dim / tp), size_t(cfg.n_heads / tp), size_t(vocab_padded / tp)};
}

size_t layer_params(const TpShape& s) { return 2 * s.d + 2 * s.d * s.ct + 2 * s.d * s.kvt + 3 * s.d * s.ft; }

// The largest fp32 gradient AGoQ holds at once: a layer's largest matrix, the lm_head's; the embedding's (a scatter
// of token rows) only in pieces of whole vocabulary rows that fit the others, as the trainer folds it
// (parallel/grad_store.h).
size_t largest_matrix(const TpShape& s, const PlanStage& st) {
  size_t m = st.n_layers > 0 ? std::max({s.d * s.ft, s.d * s.ct, s.d * s.kvt}) : 0;
  if (st.head) m = std::max(m, s.vt * s.d);
  if (st.embed) m = std::max(m, std::min(s.vt, std::max<size_t>(1, m / s.d)) * s.d);
  return m;
}

}  // namespace

const char* plan_system_name(PlanSystem s) { return s == PlanSystem::baseline ? "baseline" : "agoq"; }

size_t PlanMemory::total() const {
  size_t t = 0;
  for (size_t b : bytes) t += b;
  return t;
}

int plan_padded_vocab(const LlamaConfig& cfg, int tp, int vocab_align) {
  const size_t unit = size_t(std::max(1, vocab_align)) * size_t(tp);
  return int(ceil_div(size_t(cfg.vocab_size), unit) * unit);
}

void plan_parallel_check(const LlamaConfig& cfg, const PlanParallel& par, const PlanWorkload& w) {
  cfg.validate();
  // Bounds first, so no product below overflows (the largest are a micro-batch's logits and a stage's activations
  // over its micro-batches in flight: kept under 2^62 bytes).
  AGOQ_CHECK(par.gpus >= 1 && par.tp >= 1 && par.pp >= 1, "--gpus, --tp and --pp must be positive (got ", par.gpus,
             ", ", par.tp, ", ", par.pp, ")");
  AGOQ_CHECK(par.gpus <= kPlanMaxCount, "--gpus ", par.gpus, " is more than agoq plans for (", kPlanMaxCount, ")");
  AGOQ_CHECK(w.seq >= 1 && w.micro_batch >= 1 && w.num_micro_batches >= 1,
             "--seq, --micro-batch and --num-micro-batches must be positive (got ", w.seq, ", ", w.micro_batch, ", ",
             w.num_micro_batches, ")");
  AGOQ_CHECK(w.seq <= kPlanMaxCount && w.micro_batch <= kPlanMaxCount && w.num_micro_batches <= kPlanMaxCount, "--seq ",
             w.seq, ", --micro-batch ", w.micro_batch, ", --num-micro-batches ", w.num_micro_batches,
             ": each must be at most ", kPlanMaxCount);
  const double rows = double(w.seq) * double(w.micro_batch);
  const double widest = std::max({double(cfg.vocab_size), double(cfg.ffn_dim), double(cfg.dim)});
  AGOQ_CHECK(rows * widest * 8.0 * double(cfg.n_layers) * double(std::min(w.num_micro_batches, cfg.n_layers)) < 0x1p62,
             "--seq ", w.seq, " x --micro-batch ", w.micro_batch, " = ", rows,
             " tokens per micro-batch: this model's activations of them would exceed 2^62 bytes per GPU");
  // tp and pp within gpus first: their product then fits an int64
  AGOQ_CHECK(par.tp <= par.gpus && par.pp <= par.gpus && par.gpus % (int64_t(par.tp) * par.pp) == 0, "--gpus ",
             par.gpus, " is not divisible by tp * pp = ", int64_t(par.tp) * par.pp);
  AGOQ_CHECK(par.pp <= cfg.n_layers, "--pp ", par.pp, " exceeds the model's ", cfg.n_layers, " layers");
  AGOQ_CHECK(cfg.n_heads % par.tp == 0, "--tp ", par.tp, " does not divide the ", cfg.n_heads, " attention heads");
  AGOQ_CHECK(cfg.n_kv_heads % par.tp == 0 || par.tp % cfg.n_kv_heads == 0, "--tp ", par.tp, " and the ", cfg.n_kv_heads,
             " kv heads: one must divide the other");
  AGOQ_CHECK(cfg.ffn_dim % par.tp == 0, "--tp ", par.tp, " does not divide the MLP width ", cfg.ffn_dim);
  AGOQ_CHECK(!par.sp || par.tp > 1,
             "--sp (sequence parallelism) shards over the tensor-parallel ranks: it needs --tp > 1");
  AGOQ_CHECK(!par.sp || w.rows() % size_t(par.tp) == 0, "--sp: --tp ", par.tp, " does not divide the ", w.rows(),
             " tokens of a micro-batch");
}

std::vector<PlanStage> plan_stages(const LlamaConfig& cfg, const PlanParallel& par, const PlanWorkload& w,
                                   const PlanGpuOptions& opt) {
  plan_parallel_check(cfg, par, w);
  const TpShape s = tp_shape(cfg, par.tp, plan_padded_vocab(cfg, par.tp, opt.vocab_align));
  const int P = par.pp, base = cfg.n_layers / P, extra = cfg.n_layers % P;
  std::vector<PlanStage> out;
  int first = 0;
  for (int r = 0; r < P; ++r) {
    PlanStage st;
    st.stage = r, st.first_layer = first, st.n_layers = base + (r >= P - extra ? 1 : 0);
    st.in_flight = std::min(P - r, w.num_micro_batches);
    st.embed = r == 0, st.head = r == P - 1;
    st.params = size_t(st.n_layers) * layer_params(s);
    if (st.embed) st.params += s.vt * s.d;
    // Tied embeddings: the last stage keeps its own copy of the embedding as lm_head (Megatron does the same).
    if (st.head) st.params += s.d + (cfg.tie_embeddings && P == 1 ? 0 : s.vt * s.d);
    first += st.n_layers;
    out.push_back(st);
  }
  return out;
}

std::array<int, kActSlotCount> plan_slot_cols(const LlamaConfig& cfg, int tp) {
  const TpShape s = tp_shape(cfg, tp, cfg.vocab_size);
  const int C = int(s.d), Ct = int(s.ct), KV = int(s.kvt), F = int(s.ft);
  return {C, 1, C, Ct, KV, KV, Ct, int(s.ht), C, 1, C, F, F, F};
}

size_t plan_slot_bytes(const QuantFormat& f, const LlamaConfig& cfg, int tp, size_t rows, ActSlot s, bool sp) {
  return quant_bytes(f, act_slot_rows(s, rows, tp, sp), size_t(plan_slot_cols(cfg, tp)[int(s)]));
}

size_t plan_act_bytes(const ActPolicy& policy, const LlamaConfig& cfg, int tp, size_t rows, bool sp) {
  if (tp == 1) return act_store_bytes(policy, cfg, rows, true) + act_store_bytes(policy, cfg, rows, false);
  size_t total = 0;
  for (const auto& layer : policy.slots)
    for (int s = 0; s < kActSlotCount; ++s)
      if (layer[s].stored) total += plan_slot_bytes(layer[s].format, cfg, tp, rows, ActSlot(s), sp);
  return total;
}

PlanMemory plan_memory_static(const LlamaConfig& cfg, const PlanParallel& par, const PlanWorkload& w,
                              const PlanStage& st, PlanSystem sys, const PlanGpuOptions& opt) {
  const TpShape s = tp_shape(cfg, par.tp, plan_padded_vocab(cfg, par.tp, opt.vocab_align));
  const size_t n = st.params, D = size_t(par.dp()), rows = w.rows();
  const bool agoq = sys == PlanSystem::agoq;
  auto shard = [&](size_t x) { return par.zero1 ? ceil_div(x, D) : x; };
  PlanMemory m;
  // bf16 working weights + fp32 master weights (the master copy is sharded with the optimizer under ZeRO-1).
  m[MemCategory::weights] = 2 * n + 4 * shard(n);
  // Baseline: fp32 gradient buffers, reduced in place (Megatron's contiguous buffer). AGoQ: the 8-bit store; under
  // ZeRO-1 each rank also keeps its reduced fp32 shard (docs/plan.md).
  m[MemCategory::gradients] =
      agoq ? n + 4 * grad_q8_blocks(n, opt.grad_block) + (par.zero1 && D > 1 ? 4 * ceil_div(n, D) : 0) : 4 * n;
  // Adam m, v: fp32, or (AGoQ with --optim-state q8) 8-bit codes with two fp32 scales per block.
  m[MemCategory::optimizer] = agoq && opt.optim_q8 ? adam_q8_bytes(shard(n), opt.optim_block) : 8 * shard(n);

  // bf16 receive buffers: activation (fwd), gradient (bwd); of the rank's rows under sequence parallelism
  size_t comm = par.pp > 1 ? 2 * (par.sp ? rows / size_t(par.tp) : rows) * s.d * 2 : 0;
  if (agoq && D > 1) {
    // One bucket in flight: its fp32 staging copy, the all-to-all send/all-gather buffer and the receive buffer.
    const size_t nb = std::min(n, opt.bucket_bytes / 4);
    const CommQ8PlanBytes p = comm_q8_plan_bytes(nb, int(D), opt.grad_block);
    comm += 4 * nb + p.total + p.first_message * D;
  }
  m[MemCategory::communication] = comm;

  // Transients of one layer's backward (bf16): MLP phase dx in/out, dswiglu, dgate, dup (+ AGoQ's recomputed norm
  // output and SwiGLU output); attention phase dx in/out, dq, dk, dv, do plus FlashAttention's fp32 dq accumulator.
  size_t mlp = 2 * rows * (2 * s.d + 3 * s.ft + (agoq ? s.d + s.ft : 0));
  size_t attn = 2 * rows * (2 * s.d + 2 * (s.ct + 2 * s.kvt)) + 4 * rows * s.ct;
  size_t transient = st.n_layers > 0 ? std::max(mlp, attn) : 0;
  // The head's logits (bf16) and their fp32 copy in the vocab-parallel cross-entropy, on the last stage only.
  if (st.head) transient = std::max(transient, rows * s.vt * 6);
  // AGoQ accumulates each weight gradient into 8 bits as it is produced: one fp32 matrix gradient (or embedding
  // piece) at a time.
  m[MemCategory::workspace] = opt.reserve_bytes + transient + (agoq ? 4 * largest_matrix(s, st) : 0);
  return m;
}

PlanMemory plan_memory_per_rank(const LlamaConfig& cfg, const PlanParallel& par, const PlanWorkload& w,
                                const PlanStage& st, PlanSystem sys, const ActPolicy& policy,
                                const PlanGpuOptions& opt) {
  AGOQ_CHECK(int(policy.slots.size()) == st.n_layers, "activation policy has ", policy.slots.size(), " layers, stage ",
             st.stage, " has ", st.n_layers);
  PlanMemory m = plan_memory_static(cfg, par, w, st, sys, opt);
  m[MemCategory::activations] = size_t(st.in_flight) * plan_act_bytes(policy, cfg, par.tp, w.rows(), par.sp);
  return m;
}

PlanMemory plan_memory_cpu_trainer(const LlamaConfig& cfg, const ActPolicy& policy, const PlanCpuOptions& opt) {
  cfg.validate();
  AGOQ_CHECK(int(policy.slots.size()) == cfg.n_layers, "activation policy has ", policy.slots.size(),
             " layers, model has ", cfg.n_layers);
  ModelStage st = opt.pp > 1 ? opt.stage : model_stage_whole(cfg);
  st.tp = opt.stage.tp, st.tp_rank = opt.stage.tp_rank, st.sp = opt.stage.sp;  // a tensor-parallel shard of it
  const size_t P = model_stage_param_count(cfg, st), N = size_t(opt.batch) * opt.seq, C = cfg.dim;
  const size_t f = sizeof(float);
  PlanMemory m;
  m[MemCategory::weights] = P * f;
  // The gradient store (parallel/grad_store.h): fp32, one full buffer; q8, each unit's codes and scales plus the fp32
  // scratch (the largest unit but an untied embedding, which it holds piece by piece; tied, the embedding's own
  // beside it, or with the lm_head's gradient in pieces the blocks a micro-batch's tokens touch). ZeRO-1 adds
  // rank 0's reduced fp32 shards.
  GradStoreOptions store;
  store.kind = opt.grad_q8 ? GradStoreKind::q8 : GradStoreKind::fp32, store.block = opt.grad_block;
  store.lm_head_pieces = opt.lm_head_pieces && cfg.tie_embeddings, store.max_tokens = N;
  const std::vector<GradRange> ranges = grad_units_of(cfg, st);
  const std::vector<GradUnit> units = grad_units_sharded(ranges, std::max(1, opt.dp), 0, opt.zero, opt.grad_block);
  size_t& grads = m[MemCategory::gradients];
  if (!opt.grad_q8) grads = P * f;
  else {
    for (const GradRange& r : ranges) grads += r.size() + f * grad_q8_blocks(r.size(), opt.grad_block);
    grads += f * grad_store_scratch_floats(cfg, st, store);
  }
  // One AdamW per gradient unit, each over rank 0's part of it (DpOptimizer).
  for (const GradUnit& u : units) {
    if (opt.zero) grads += f * u.own.size();
    m[MemCategory::optimizer] += opt.optim_q8 ? adam_q8_bytes(u.own.size(), opt.optim_block) : 2 * f * u.own.size();
  }
  size_t act = 0;  // one micro-batch of the stage's layers
  for (int l = st.first_layer; l < st.end_layer; ++l)
    for (int s = 0; s < kActSlotCount; ++s)
      if (policy.at(l, ActSlot(s)).stored)
        act += plan_slot_bytes(policy.at(l, ActSlot(s)).format, cfg, st.tp, N, ActSlot(s), st.sp);
  m[MemCategory::activations] = size_t(opt.pp > 1 ? opt.in_flight : 1) * act;
  // The pipeline's double-buffered sends (a sequence-parallel rank's rows), and the 8-bit reduction's workspace.
  if (opt.pp > 1) m[MemCategory::communication] = 2 * size_t(st.rows_held(int(N))) * C * f;
  GradReduceOptions reduce;
  reduce.reduce = opt.reduce, reduce.zero = opt.zero, reduce.bucket_bytes = opt.bucket_bytes;
  m[MemCategory::communication] +=
      grad_reduce_workspace_bytes(units, grad_store_pieces(cfg, st, store), opt.grad_q8, opt.grad_block, reduce,
                                  std::max(1, opt.dp), 0, opt.dp_one_host)
          .total();

  // The model's buffers and the larger attention call's scratch, which lives on top of them.
  const ShardDims shard = model_shard_dims(cfg, st);
  const int threads = opt.threads > 0 ? opt.threads : omp_get_max_threads();
  m[MemCategory::workspace] =
      llama_workspace_bytes(cfg, opt.batch, opt.seq, policy, st, opt.grad_q8 && opt.lm_head_pieces) +
      attention_scratch_bytes(opt.batch, opt.seq, shard.H, shard.Hkv, shard.hd, threads,
                              opt.gemm_bf16 ? GemmPrecision::bf16 : GemmPrecision::fp32);
  if (opt.gemm_bf16) {
    const LlamaGemmBf16Bytes bf16 =
        llama_gemm_bf16_bytes(cfg, opt.batch, opt.seq, st, opt.grad_q8 && opt.lm_head_pieces, opt.bf16_weights);
    m[MemCategory::weights] += bf16.weights, m[MemCategory::workspace] += bf16.workspace;
  }
  if (!policy.backward)  // a forward-only model (scoring, sampling): no gradient store, optimizer or reduction
    m[MemCategory::gradients] = m[MemCategory::optimizer] = m[MemCategory::communication] = 0;
  return m;
}

size_t plan_parse_bytes(const std::string& text, const std::string& flag) {
  // (below 1 byte or from 2^62 bytes on: no GPU or host has that, and sizes derived from it would overflow)
  auto out_of_range = [&] { fail(flag, " '", text, "' is out of range (1 byte to 4 EiB)"); };
  size_t i = 0;
  while (i < text.size() && (std::isdigit((unsigned char)text[i]) || text[i] == '.')) ++i;
  double value = 0;
  try {
    size_t used = 0;
    AGOQ_CHECK(i > 0, "");
    value = std::stod(text.substr(0, i), &used);
    AGOQ_CHECK(used == i, "");
  } catch (const std::out_of_range&) {
    out_of_range();
  } catch (const std::exception&) {
    fail(flag, ": bad memory size '", text, "' (expected e.g. 80GiB, 80GB, 512MiB)");
  }
  std::string unit = text.substr(i);
  unit.erase(0, unit.find_first_not_of(' '));
  for (char& c : unit) c = char(std::tolower((unsigned char)c));
  static const std::pair<const char*, double> units[] = {
      {"", 1},     {"b", 1},      {"k", 0x1p10},   {"kib", 0x1p10}, {"kb", 1e3},   {"m", 0x1p20},   {"mib", 0x1p20},
      {"mb", 1e6}, {"g", 0x1p30}, {"gib", 0x1p30}, {"gb", 1e9},     {"t", 0x1p40}, {"tib", 0x1p40}, {"tb", 1e12}};
  for (const auto& [name, scale] : units)
    if (unit == name) {
      const double bytes = value * scale;
      if (!(bytes >= 1 && bytes < 0x1p62)) out_of_range();
      return size_t(std::llround(bytes));
    }
  fail(flag, ": bad memory size '", text, "': unknown unit '", text.substr(i),
       "' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
}

}  // namespace agoq
