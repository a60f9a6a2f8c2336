#include "plan/calibration.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "arch/params.h"
#include "core/error.h"
#include "core/input_file.h"
#include "core/json_read.h"
#include "core/memory.h"
#include "core/rng.h"
#include "model/attention.h"
#include "model/llama.h"
#include "model/ops.h"
#include "opmath/op_flops.h"
#include "optim/adamw.h"
#include "parallel/comm_tensor_group.h"
#include "quant/grad_q8.h"
#include "quant/tensor.h"

namespace agoq {

PlanCalibration plan_calibration_gpu_defaults() {
  PlanCalibration c;
  c.source = "defaults: H100-class GPUs, 8 per node, NVLink 450 GB/s, 200 Gbit/s between nodes";
  PlanDeviceRates& d = c.device;
  d.gemm.points = {{1e8, 250e12}, {1e10, 550e12}, {1e12, 650e12}};
  d.attention.points = {{1024, 350e12}, {8192, 450e12}};
  // The model counts memory-bound bytes as fp32; the GPU moves bf16, so ~2x HBM's 3 TB/s in those units.
  d.elementwise_bw = 5e12, d.act_quant_bw = 4e12, d.act_bf16_bw = 5e12, d.grad_fold_bw = 2.5e12;
  d.adam_params_s = 1e11, d.adam_q8_params_s = 1.5e11;  // ~28 and ~14 bytes per parameter at ~3 TB/s
  c.intra = {450e9, 5e-6, 450e9};
  c.inter = {25e9, 10e-6, 25e9};
  c.ranks_per_node = 8;
  c.trainer = PlanTrainer::megatron_gpu;
  c.dp_overlap = 1.0;
  return c;
}

namespace {

nlohmann::json curve_json(const PlanRateCurve& c) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& [x, y] : c.points) j.push_back({x, y});
  return j;
}

// Sane bounds of what a calibration holds, so that no rate or time derived from it leaves a double's range:
// a rate per second of one rank (FLOP/s, bytes/s, parameters/s) is at least 1 and at most 1e18 (an exa-unit); a
// rate relative to another (GEMM rate by rows, the model's and TP's efficiency) is within a factor of 1e6 of 1; a
// size (FLOPs per call, sequence length, rows) is from 1 to 1e30; a latency from a picosecond to an hour.
struct CalBounds {
  double lo, hi;
};
constexpr CalBounds kCalRate{1, 1e18}, kCalRatio{1e-6, 1e6}, kCalSize{1, 1e30}, kCalLatency{1e-12, 3600},
    kCalRanks{1, kPlanMaxCount};

bool within(const nlohmann::json& v, CalBounds b) {
  return v.is_number() && v.get<double>() >= b.lo && v.get<double>() <= b.hi;
}

PlanRateCurve curve_from(const nlohmann::json& j, const std::string& what, CalBounds rate) {
  AGOQ_CHECK(j.is_array() && !j.empty(), what, " must be a non-empty array of [size, rate] pairs");
  PlanRateCurve c;
  for (const auto& p : j) {
    AGOQ_CHECK(p.is_array() && p.size() == 2 && p[0].is_number() && p[1].is_number(), what,
               " must hold [size, rate] pairs (got ", json_excerpt(p), ")");
    AGOQ_CHECK(within(p[0], kCalSize) && within(p[1], rate), what, ": [", json_excerpt(p[0]), ", ", json_excerpt(p[1]),
               "] is out of range (sizes ", kCalSize.lo, " to ", kCalSize.hi, ", rates ", rate.lo, " to ", rate.hi,
               ")");
    const double x = p[0], y = p[1];
    AGOQ_CHECK(c.points.empty() || x > c.points.back().first, what, " needs its sizes in increasing order");
    c.points.push_back({x, y});
  }
  return c;
}

nlohmann::json link_json(const PlanLink& l) {
  return {{"bytes_s", l.bytes_s}, {"latency_s", l.latency_s}, {"send_bytes_s", l.send_bytes_s}};
}

}  // namespace

nlohmann::json plan_calibration_json(const PlanCalibration& c) {
  const PlanDeviceRates& d = c.device;
  return {{"source", c.source},
          {"trainer", plan_trainer_name(c.trainer)},
          {"device",
           {{"gemm_flops_by_call_flops", curve_json(d.gemm)},
            {"gemm_rate_by_rows", curve_json(d.gemm_rows)},
            {"attention_flops_by_seq", curve_json(d.attention)},
            {"elementwise_bytes_s", d.elementwise_bw},
            {"act_quant_bytes_s", d.act_quant_bw},
            {"act_bf16_bytes_s", d.act_bf16_bw},
            {"grad_fold_bytes_s", d.grad_fold_bw},
            {"adam_params_s", d.adam_params_s},
            {"adam_q8_params_s", d.adam_q8_params_s},
            {"model_efficiency", d.model_efficiency}}},
          {"intra", link_json(c.intra)},
          {"inter", link_json(c.inter)},
          {"ranks_per_node", c.ranks_per_node},
          {"dp_overlap", c.dp_overlap},
          {"core_share", c.core_share},
          {"wait_yield", c.wait_yield},
          {"tp_efficiency", c.tp_efficiency},
          {"measured_ranks", c.measured_ranks}};
}

PlanCalibration plan_calibration_from_json(const nlohmann::json& j, const std::string& source) {
  auto at = [&](const nlohmann::json& o, const char* key, const std::string& path) -> const nlohmann::json& {
    AGOQ_CHECK(o.is_object() && o.contains(key), source, ": calibration field '", path, key, "' is missing");
    return o[key];
  };
  auto number = [&](const nlohmann::json& v, const std::string& name, CalBounds b, bool whole = false) {
    AGOQ_CHECK(within(v, b) && (!whole || v.get<double>() == std::floor(v.get<double>())), source,
               ": calibration field '", name, "' must be a ", whole ? "whole number" : "number", " from ", b.lo, " to ",
               b.hi, " (got ", json_excerpt(v), ")");
    return v.get<double>();
  };
  auto field = [&](const nlohmann::json& o, const char* key, const std::string& path, CalBounds b) {
    return number(at(o, key, path), path + key, b);
  };
  PlanCalibration c;
  c.source = source;
  const nlohmann::json& t = at(j, "trainer", "");
  AGOQ_CHECK(t.is_string(), source, ": calibration field 'trainer' must be a string (got ", json_excerpt(t), ")");
  try {
    c.trainer = plan_trainer_parse(t.get<std::string>());
  } catch (const Error& e) {
    fail(source, ": calibration field ", e.what());
  }
  const nlohmann::json& d = at(j, "device", "");
  c.device.gemm =
      curve_from(at(d, "gemm_flops_by_call_flops", "device."), source + ": device.gemm_flops_by_call_flops", kCalRate);
  c.device.attention =
      curve_from(at(d, "attention_flops_by_seq", "device."), source + ": device.attention_flops_by_seq", kCalRate);
  // absent or empty (calibrations written before it was measured, the GPU defaults): every row count alike
  if (d.contains("gemm_rate_by_rows") && !(d["gemm_rate_by_rows"].is_array() && d["gemm_rate_by_rows"].empty()))
    c.device.gemm_rows = curve_from(d["gemm_rate_by_rows"], source + ": device.gemm_rate_by_rows", kCalRatio);
  c.device.elementwise_bw = field(d, "elementwise_bytes_s", "device.", kCalRate);
  c.device.act_quant_bw = field(d, "act_quant_bytes_s", "device.", kCalRate);
  c.device.act_bf16_bw = field(d, "act_bf16_bytes_s", "device.", kCalRate);
  c.device.grad_fold_bw = field(d, "grad_fold_bytes_s", "device.", kCalRate);
  c.device.adam_params_s = field(d, "adam_params_s", "device.", kCalRate);
  c.device.adam_q8_params_s = field(d, "adam_q8_params_s", "device.", kCalRate);
  c.device.model_efficiency = field(d, "model_efficiency", "device.", kCalRatio);
  for (auto [key, link] : {std::pair<const char*, PlanLink*>{"intra", &c.intra}, {"inter", &c.inter}}) {
    const nlohmann::json& l = at(j, key, "");
    link->bytes_s = field(l, "bytes_s", std::string(key) + ".", kCalRate);
    link->latency_s = field(l, "latency_s", std::string(key) + ".", kCalLatency);
    link->send_bytes_s = field(l, "send_bytes_s", std::string(key) + ".", kCalRate);
  }
  c.ranks_per_node = int(number(at(j, "ranks_per_node", ""), "ranks_per_node", kCalRanks, true));
  c.dp_overlap = field(j, "dp_overlap", "", {0, 1});
  c.core_share = field(j, "core_share", "", {1e-6, 1});
  c.wait_yield = field(j, "wait_yield", "", {0, 1});
  // absent from calibrations written before it was measured: TP as the terms say
  c.tp_efficiency = j.contains("tp_efficiency") ? field(j, "tp_efficiency", "", kCalRatio) : 1.0;
  c.measured_ranks =
      j.contains("measured_ranks") ? int(number(j["measured_ranks"], "measured_ranks", {0, kPlanMaxCount}, true)) : 0;
  return c;
}

PlanCalibration plan_calibration_load(const std::string& path, const std::string& flag) {
  const nlohmann::json j = json_parse(input_file_read(path, flag), flag + " " + path);
  return plan_calibration_from_json(j, path);
}

std::string plan_calibration_text(const PlanCalibration& c) {
  const PlanDeviceRates& d = c.device;
  std::string out = "calibration: " + c.source + "\n  GEMM GFLOP/s by FLOPs per call:";
  char line[160];
  for (const auto& [x, y] : d.gemm.points) std::snprintf(line, sizeof line, " %.2g:%.1f", x, y / 1e9), out += line;
  if (!d.gemm_rows.points.empty()) out += "\n  GEMM rate by rows, of 256 rows':";
  for (const auto& [x, y] : d.gemm_rows.points) std::snprintf(line, sizeof line, " %.0f:%.2f", x, y), out += line;
  out += "\n  attention GFLOP/s by seq:";
  for (const auto& [x, y] : d.attention.points) std::snprintf(line, sizeof line, " %.0f:%.1f", x, y / 1e9), out += line;
  std::snprintf(line, sizeof line, "\n  GB/s: elementwise %.1f, 4-bit store %.1f, bf16 store %.1f, q8 grad fold %.1f\n",
                d.elementwise_bw / 1e9, d.act_quant_bw / 1e9, d.act_bf16_bw / 1e9, d.grad_fold_bw / 1e9);
  out += line;
  std::snprintf(line, sizeof line,
                "  AdamW Mparams/s: fp32 %.0f, q8 %.0f; model efficiency %.2f (TP shards %.2f of it); %.2f "
                "cores per rank, a waiting rank yields %.2f of its core\n",
                d.adam_params_s / 1e6, d.adam_q8_params_s / 1e6, d.model_efficiency, c.tp_efficiency, c.core_share,
                c.wait_yield);
  out += line;
  std::snprintf(line, sizeof line,
                "  links (collective / one-way GB/s, latency): intra %.3g / %.3g %.1f us, inter "
                "%.3g / %.3g %.1f us, %d ranks per node\n",
                c.intra.bytes_s / 1e9, c.intra.send_bytes_s / 1e9, c.intra.latency_s * 1e6, c.inter.bytes_s / 1e9,
                c.inter.send_bytes_s / 1e9, c.inter.latency_s * 1e6, c.ranks_per_node);
  return out + line;
}

double plan_parse_rate(const std::string& text, const std::string& flag) {
  std::string t;
  for (char ch : text)
    if (ch != ' ') t += char(std::tolower(static_cast<unsigned char>(ch)));
  if (t.size() > 2 && t.substr(t.size() - 2) == "/s") t.resize(t.size() - 2);
  auto out_of_range = [&] {
    fail(flag, " '", text, "' is out of range (", kCalRate.lo, " B/s to ", kCalRate.hi, " B/s)");
  };
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(t, &used);
  } catch (const std::out_of_range&) {  // beyond a double, or below its smallest
    out_of_range();
  } catch (const std::exception&) {
    fail(flag, " '", text, "' is not a rate such as 900GB/s or 200Gbit/s");
  }
  const std::string unit = t.substr(used);
  const std::pair<const char*, double> units[] = {{"", 1},         {"b", 1},       {"kb", 1e3},     {"mb", 1e6},
                                                  {"gb", 1e9},     {"tb", 1e12},   {"kbit", 125.0}, {"mbit", 125e3},
                                                  {"gbit", 125e6}, {"tbit", 125e9}};
  for (const auto& [name, scale] : units)
    if (unit == name) {
      AGOQ_CHECK(v > 0, flag, " '", text, "' must be a positive rate");
      if (!(v * scale >= kCalRate.lo && v * scale <= kCalRate.hi)) out_of_range();
      return v * scale;
    }
  fail(flag, " '", text, "': unknown unit '", unit, "' (B/s, KB/s, MB/s, GB/s, TB/s, or Kbit, Mbit, Gbit, Tbit)");
}

namespace {

using Clock = std::chrono::steady_clock;

// Seconds per call of fn, averaged over at least `reps` calls and 0.25 s after one warm-up call, every rank
// starting together: a rate every rank sees while all of them run (a best-of would catch one rank alone on a core).
// A collective fn runs exactly `reps` times on every rank.
double mean_seconds(Communicator& world, int reps, const std::function<void()>& fn, bool collective = false) {
  fn();
  world.barrier();
  const auto t0 = Clock::now();
  double elapsed = 0;
  long calls = 0;
  while (calls < reps || (!collective && elapsed < 0.25)) {
    fn();
    ++calls;
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  return elapsed / double(calls);
}

// The mean over the ranks of a rate each measured.
double rank_mean(Communicator& world, double x) {
  world.allreduce(&x, &x, 1, CommDtype::f64, CommOp::sum);
  return x / world.size();
}

// The mean over the ranks that count (at least one must) of what each of them measured.
double counted_mean(Communicator& world, bool counts, double x) {
  double sums[2] = {counts ? x : 0.0, counts ? 1.0 : 0.0};
  world.allreduce(sums, sums, 2, CommDtype::f64, CommOp::sum);
  return sums[0] / sums[1];
}

Buffer<float> random_values(size_t n, uint64_t seed) {
  Buffer<float> b(n, MemCategory::workspace, "plan.calibrate");
  Rng rng(seed);
  for (size_t i = 0; i < n; ++i) b[i] = rng.uniform() - 0.5f;
  return b;
}

// Seconds of one sgemm forward + backward (3 calls of 2 rows k k FLOPs) of rows x k by k x k.
double gemm_seconds(Communicator& world, int reps, int rows, int k) {
  Buffer<float> in = random_values(size_t(rows) * k, 1), w = random_values(size_t(k) * k, 2);
  Buffer<float> out = random_values(size_t(rows) * k, 3), din(in.size(), MemCategory::workspace),
                dw(w.size(), MemCategory::workspace);
  return mean_seconds(world, reps, [&] {
    matmul_forward(out.data(), in.data(), w.data(), rows, k, k);
    matmul_backward(din.data(), dw.data(), out.data(), in.data(), w.data(), rows, k, k);
  });
}

PlanRateCurve measure_gemm(Communicator& world, int reps) {
  PlanRateCurve c;
  const int rows = 256;
  for (int k : {64, 128, 256, 512, 1024, 2048}) {
    const double call = 2.0 * rows * k * k;
    c.points.push_back({call, rank_mean(world, 3 * call / gemm_seconds(world, reps, rows, k))});
  }
  return c;
}

// The agoq trainer's GEMMs have fewer rows where a micro-batch holds fewer than 256 tokens (its tiles): the rate at
// 64 and 128 rows against 256, at the widths of a small model (k = 256, 1024).
PlanRateCurve measure_gemm_rows(Communicator& world, int reps) {
  PlanRateCurve c;
  for (int rows : {64, 128, 256}) {
    double flops = 0, s = 0;
    for (int k : {256, 1024}) flops += 3 * 2.0 * rows * k * k, s += gemm_seconds(world, reps, rows, k);
    c.points.push_back({double(rows), rank_mean(world, flops / s)});
  }
  const double at256 = c.points.back().second;
  for (auto& p : c.points) p.second /= at256;
  return c;
}

PlanRateCurve measure_attention(Communicator& world, int reps) {
  PlanRateCurve c;
  const int H = 4, hd = 64;
  for (int T : {128, 512, 2048}) {
    const size_t n = size_t(T) * H * hd;
    Buffer<float> q = random_values(n, 4), k = random_values(n, 5), v = random_values(n, 6), dout = random_values(n, 7);
    Buffer<float> o(n, MemCategory::workspace), lse(size_t(H) * T, MemCategory::workspace),
        dq(n, MemCategory::workspace), dk(n, MemCategory::workspace), dv(n, MemCategory::workspace);
    const double flops = attention_forward_flops(1, H, T, hd) + attention_backward_flops(1, H, T, hd);
    const double s = mean_seconds(world, reps, [&] {
      attention_forward(o.data(), lse.data(), q.data(), k.data(), v.data(), 1, T, H, H, hd);
      attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), o.data(),
                         lse.data(), 1, T, H, H, hd);
    });
    c.points.push_back({double(T), rank_mean(world, flops / s)});
  }
  return c;
}

// RMSNorm and SwiGLU forward + backward, bytes counted as the time model counts them (time_model.cpp).
double measure_elementwise(Communicator& world, int reps) {
  const int N = 256, C = 1024;
  const size_t n = size_t(N) * C;
  Buffer<float> x = random_values(n, 8), g = random_values(n, 9), dout = random_values(n, 10), w = random_values(C, 11);
  Buffer<float> out(n, MemCategory::workspace), dx(n, MemCategory::workspace), du(n, MemCategory::workspace),
      rstd(N, MemCategory::workspace), dw(C, MemCategory::workspace);
  const double s = mean_seconds(world, reps, [&] {
    rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
    rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
    swiglu_forward(out.data(), g.data(), x.data(), n);
    swiglu_backward(dx.data(), du.data(), dout.data(), g.data(), x.data(), n);
  });
  return rank_mean(world, (8.0 + 16 + 12 + 20) * double(n) / s);
}

// One encode (stochastic rounding, as the store does) and one decode of a (256, 1024) slot in `fmt`.
double measure_store(Communicator& world, int reps, const QuantFormat& fmt) {
  const size_t rows = 256, cols = 1024;
  Buffer<float> x = random_values(rows * cols, 12), back(rows * cols, MemCategory::workspace);
  QuantizedTensor t(fmt, rows, cols, MemCategory::workspace, "plan.calibrate");
  uint64_t step = 0;
  const double s = mean_seconds(world, reps, [&] {
    quant_encode(t, x.data(), {++step, 0});
    quant_decode(t, back.data());
  });
  return rank_mean(world, 4.0 * double(rows * cols) / s);
}

double measure_grad_fold(Communicator& world, int reps) {
  const size_t n = size_t(1) << 22;
  Buffer<float> g = random_values(n, 13);
  Buffer<int8_t> codes(n, MemCategory::workspace, "plan.calibrate");
  Buffer<float> scales(grad_q8_blocks(n, 256), MemCategory::workspace, "plan.calibrate");
  std::fill(codes.begin(), codes.end(), int8_t(0));
  std::fill(scales.begin(), scales.end(), 0.0f);
  GradQ8Options o;
  o.rounding = QuantRounding::stochastic;
  const double s = mean_seconds(world, reps, [&] {
    ++o.seed.seed;
    grad_q8_accumulate(codes.data(), scales.data(), g.data(), n, o);
  });
  return rank_mean(world, 4.0 * double(n) / s);
}

double measure_adam(Communicator& world, int reps, OptimState state) {
  LlamaConfig cfg;
  cfg.dim = 512, cfg.n_layers = 2, cfg.n_heads = 8, cfg.n_kv_heads = 8, cfg.ffn_dim = 1408, cfg.vocab_size = 4096;
  ParamSet p(cfg, MemCategory::weights, "plan.calibrate"), g(cfg, MemCategory::gradients, "plan.calibrate");
  Rng rng(14);
  for (size_t i = 0; i < g.size(); ++i) g.data()[i] = 1e-3f * (rng.uniform() - 0.5f), p.data()[i] = 0.01f;
  AdamWConfig c;
  c.state = state;
  AdamW adam(p, c);
  long step = 0;
  const double s = mean_seconds(world, reps, [&] { adam.step(p.data(), g.data(), 1e-4f, ++step); });
  return rank_mean(world, double(p.size()) / s);
}

// The model the calibration runs: a shape unlike the validation's, fixed inputs.
struct CalibrationModel {
  LlamaConfig cfg;
  int B = 2, T = 256;
  std::vector<int32_t> in, tgt;
  CalibrationModel() {
    cfg.dim = 384, cfg.n_layers = 4, cfg.n_heads = 6, cfg.n_kv_heads = 2, cfg.ffn_dim = 1024, cfg.vocab_size = 2048;
    cfg.max_seq_len = T;
    Rng rng(19);
    in.resize(size_t(B) * T), tgt.resize(in.size());
    for (size_t i = 0; i < in.size(); ++i)
      in[i] = int32_t(rng.below(cfg.vocab_size)), tgt[i] = int32_t(rng.below(cfg.vocab_size));
  }
  // The model's step terms for it (fp32, one micro-batch) on `tp` shards.
  double predicted_s(const PlanCalibration& c, int tp) const {
    PlanTimeOptions base;
    base.system = PlanSystem::baseline;
    const PlanTime t = plan_step_time(cfg, {tp, tp, 1}, {T, B, 1}, base, c);
    return t.term("gemm+attention") + t.term("elementwise") + t.term("tp_comm");
  }
};

// A small model's forward + backward (fp32, a shape unlike the validation's) on every rank at once, against the
// GEMM, attention and elementwise terms the rates measured so far predict for it.
double measure_model_efficiency(Communicator& world, int reps, const PlanCalibration& c) {
  const CalibrationModel m;
  LlamaModel model(m.cfg, m.B, m.T, ActPolicy::parse("fp32", m.cfg.n_layers));
  model.init_weights(18);
  const double s = mean_seconds(world, reps, [&] { model.forward_backward(m.in.data(), m.tgt.data(), m.B, m.T); });
  return rank_mean(world, m.predicted_s(c, 1) / s);
}

// The same model as 2 tensor-parallel shards on pairs of ranks (2i, 2i + 1, as the trainer groups TP 2), against
// its terms for TP 2, relative to the unsharded model's efficiency. Where ranks time-share cores a shard waits at
// every collective for its partner, whose core is serving another rank: lost time the link's latency and bandwidth
// do not show. 1 for a single rank.
double measure_tp_efficiency(Communicator& world, int reps, const PlanCalibration& c) {
  const int R = world.size(), r = world.rank();
  if (R < 2) return 1.0;
  const bool paired = r / 2 * 2 + 1 < R;  // in an odd world the last rank runs the whole model beside the pairs
  const CalibrationModel m;
  std::unique_ptr<Communicator> pair = world.split(r / 2, r);
  CommTensorGroup group(*pair);
  const ModelStage whole = model_stage_whole(m.cfg);
  LlamaModel model(m.cfg, m.B, m.T, ActPolicy::parse("fp32", m.cfg.n_layers),
                   paired ? model_stage_shard(m.cfg, whole, 2, r % 2) : whole, 1, {}, paired ? &group : nullptr);
  model.init_weights(18);
  // The same number of calls on every rank (the shards' collectives pair up), about a second of them.
  const double s = mean_seconds(
      world, 4 * reps, [&] { model.forward_backward(m.in.data(), m.tgt.data(), m.B, m.T); }, true);
  return counted_mean(world, paired, m.predicted_s(c, 2) / s);
}

// Latency as busy ranks see it: pairs of ranks alternate a GEMM of a few milliseconds with an 8-byte all-reduce
// between them; the time the all-reduces add to the GEMMs alone, per call and per ring step (at least an idle
// one's). Where ranks share cores this is mostly waiting for the partner to be scheduled, which an idle ping-pong
// never shows.
double measure_latency_under_load(Communicator& world, int reps) {
  std::unique_ptr<Communicator> pair = world.split(world.rank() / 2, world.rank());
  const int k = 256, calls = 20 * reps;
  Buffer<float> in = random_values(size_t(k) * k, 16), w = random_values(size_t(k) * k, 17),
                out(size_t(k) * k, MemCategory::workspace);
  double one = 1;
  auto loop = [&](bool sync) {
    world.barrier();
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) {
      for (int g = 0; g < 8; ++g) matmul_forward(out.data(), in.data(), w.data(), k, k, k);
      if (sync) pair->allreduce(&one, &one, 1, CommDtype::f64, CommOp::sum);
    }
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  loop(true);
  const double alone = loop(false), synced = loop(true);
  const int steps = std::max(1, 2 * (pair->size() - 1));
  // The difference of two noisy loops can vanish: an idle round trip is the floor.
  const auto t0 = Clock::now();
  for (int i = 0; i < 10 * calls; ++i) pair->allreduce(&one, &one, 1, CommDtype::f64, CommOp::sum);
  const double idle = std::chrono::duration<double>(Clock::now() - t0).count() / (10 * calls) / steps;
  return rank_mean(world, std::max({1e-7, idle, (synced - alone) / calls / steps}));
}

// With cores time-shared: how much faster ranks compute while their partners wait in a receive than while every
// rank computes, as a part of the most it could be (every waiting rank's core handed over). 1 without sharing.
// Rank r's partner is r + R/2: the pairs a launcher that places ranks round-robin on cores puts on one core (and
// the stages of a 2-stage pipeline), so a pinned run measures what its pipeline gets.
double measure_wait_yield(Communicator& world, int reps, double core_share) {
  const int R = world.size(), r = world.rank(), half = R / 2;
  const bool waits = r >= half && r < 2 * half;  // in an odd world the last rank has no partner and computes
  const int partner = r < half ? r + half : waits ? r - half : R;
  const double most = std::min(1.0, 2 * core_share) / core_share;  // half the ranks busy: each gets up to a core
  if (core_share >= 1 || R < 2 || most <= 1) return 1.0;
  const int k = 256, gemms = 40 * reps;
  Buffer<float> in = random_values(size_t(k) * k, 20), w = random_values(size_t(k) * k, 21),
                out(size_t(k) * k, MemCategory::workspace);
  auto compute = [&] {
    for (int g = 0; g < gemms; ++g) matmul_forward(out.data(), in.data(), w.data(), k, k, k);
  };
  auto timed = [&](bool half_busy) {
    world.barrier();
    const auto t0 = Clock::now();
    char token = 0;
    if (!half_busy || !waits) compute();
    if (half_busy && partner < R) {  // the second rank of each pair waits for its partner's token
      if (waits) world.recv(&token, 1, partner);
      else world.send(&token, 1, partner);
    }
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  timed(false);
  const double all = timed(false), some = timed(true);
  const double speedup = counted_mean(world, !waits, all / some);  // the ranks that computed in both
  return std::clamp((speedup - 1) / (most - 1), 0.0, 1.0);
}

// One-way bandwidth: rank 2i sends a large buffer to rank 2i + 1, every pair at once (as pipeline stages do); the
// receivers' rate, averaged (a rank without a partner in an odd world only waits).
double measure_send(Communicator& world, int reps, double latency) {
  const int r = world.rank(), partner = r ^ 1;
  const bool paired = partner < world.size();
  const size_t bytes = size_t(16) << 20;
  Buffer<uint8_t> buf(bytes, MemCategory::workspace, "plan.calibrate");
  std::fill(buf.begin(), buf.end(), uint8_t(r));
  auto once = [&] {
    if (!paired) return;
    if (r % 2 == 0) world.send(buf.data(), bytes, partner);
    else world.recv(buf.data(), bytes, partner);
  };
  const double s = mean_seconds(world, 2 * reps, once, true);
  return counted_mean(world, paired && r % 2 == 1, double(bytes) / std::max(1e-9, s - latency));
}

// A ring all-reduce's bandwidth over the world (a large buffer, inverted through plan_allreduce_s's formula), the
// latency under load and the one-way bandwidth.
PlanLink measure_link(Communicator& world, int reps) {
  const int n = world.size();
  if (n == 1) return {1e12, 1e-7, 1e12};  // nothing to cross: effectively free
  const double lat = measure_latency_under_load(world, reps);
  const size_t big = size_t(4) << 20;
  Buffer<float> x = random_values(big, 15);
  const double s_big = mean_seconds(
      world, 4 * reps, [&] { world.allreduce(x.data(), x.data(), big, CommDtype::f32, CommOp::sum); }, true);
  const double wire = 2.0 * (n - 1) / n * 4.0 * double(big);
  return {wire / std::max(1e-9, s_big - 2.0 * (n - 1) * lat), lat, measure_send(world, reps, lat)};
}

}  // namespace

PlanCalibration plan_calibrate(Communicator& world, const PlanCalibrateOptions& opt) {
  AGOQ_CHECK(opt.reps >= 1, "--reps must be >= 1");
  PlanCalibration c;
  c.trainer = PlanTrainer::agoq_cpu;
  c.measured_ranks = world.size();
  c.device.gemm = measure_gemm(world, opt.reps);
  c.device.gemm_rows = measure_gemm_rows(world, opt.reps);
  c.device.attention = measure_attention(world, opt.reps);
  c.device.elementwise_bw = measure_elementwise(world, opt.reps);
  c.device.act_quant_bw = measure_store(world, opt.reps, quant_format_int(4, 128, true, QuantRounding::stochastic));
  c.device.act_bf16_bw = measure_store(world, opt.reps, quant_format_bf16());
  c.device.grad_fold_bw = measure_grad_fold(world, opt.reps);
  c.device.adam_params_s = measure_adam(world, opt.reps, OptimState::fp32);
  c.device.adam_q8_params_s = measure_adam(world, opt.reps, OptimState::q8);
  c.device.model_efficiency = measure_model_efficiency(world, opt.reps, c);
  const PlanLink link = measure_link(world, opt.reps);
  const bool one_host = world.one_host();
  c.ranks_per_node = opt.ranks_per_node > 0 ? opt.ranks_per_node : one_host ? world.size() : 1;
  c.intra = c.inter = link;  // the one link measured stands for the other, which this world could not see
  // On one host the collectives are copies by the same cores that compute: nothing hides them.
  c.dp_overlap = one_host ? 0.0 : 1.0;
  const double cores = std::max(1u, std::thread::hardware_concurrency());
  c.core_share = one_host ? std::min(1.0, cores / world.size()) : 1.0;
  c.wait_yield = measure_wait_yield(world, opt.reps, c.core_share);
  c.tp_efficiency = one_host ? measure_tp_efficiency(world, opt.reps, c) : 1.0;
  c.source = "agoq plan --calibrate on " + std::to_string(world.size()) + (world.size() == 1 ? " rank" : " ranks") +
             (one_host ? " of one host" : " over a network");
  return c;
}

}  // namespace agoq
