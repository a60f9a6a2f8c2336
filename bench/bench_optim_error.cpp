// `agoq bench optim-error`: how far 8-bit Adam states drift from fp32 ones, per block size, mapping and rounding.
// A small LLaMA trains on real text (--data, e.g. data/austen) with fp32 AdamW; every variant's 8-bit state is fed
// the same (clipped) gradients each step and updates a throw-away copy of the weights, so all variants see one
// gradient stream and differ only by their quantization. Reported at a few steps: the relative error of m, of v and
// of the update m / (sqrt(v) + eps) against the fp32 state, and the share of values whose v decodes to zero while
// the fp32 v is not (which makes the update m / eps: the failure a linear v invites).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/rng.h"
#include "data/data_loader.h"
#include "model/llama.h"
#include "optim/adamw.h"

namespace agoq {
namespace {

struct Options {
  std::string data;
  int steps = 300, batch = 8, seq = 128, dim = 128, layers = 2;
  bool json = false;
};

struct Variant {
  std::string name;
  AdamQ8Format fmt;
};

std::vector<Variant> variants() {
  std::vector<Variant> out;
  auto add = [&](int block, int mr, int vr, QuantRounding r) {
    const char* mn = mr == 1 ? "linear" : "sqrt";
    const char* vn = vr == 1 ? "linear" : vr == 2 ? "sqrt" : "4th-root";
    out.push_back({"block " + std::to_string(block) + ", m " + mn + ", v " + vn + ", " +
                       (r == QuantRounding::nearest ? "nearest" : "stochastic"),
                   {.block = block, .m_root = mr, .v_root = vr, .rounding = r, .seed = 7}});
  };
  for (int mr : {1, 2})
    for (int vr : {1, 2, 4}) add(256, mr, vr, QuantRounding::nearest);
  for (int block : {32, 64, 128}) add(block, 1, 2, QuantRounding::nearest);
  for (int block : {64, 128})
    for (int mr : {1, 2}) add(block, mr, 4, QuantRounding::nearest);
  add(256, 1, 2, QuantRounding::stochastic);
  add(256, 1, 4, QuantRounding::stochastic);
  return out;
}

struct Errors {
  double m = 0, v = 0, update = 0, v_zero = 0;
};

// The variant's decoded state against the fp32 one (after the step), and its update (from `before` to `after`)
// against the fp32 update (from `before` to `ref_after`).
Errors errors_of(AdamW& ref, AdamW& q8, const float* before, const float* ref_after, const float* after) {
  const size_t n = ref.m().size();
  Buffer<float> m(n, MemCategory::workspace, "bench.error"), v(n, MemCategory::workspace, "bench.error");
  q8.moments_store_fp32(m.data(), v.data());
  double dm = 0, nm = 0, dv = 0, nv = 0, du = 0, nu = 0;
  size_t zeros = 0;
  for (size_t i = 0; i < n; ++i) {
    const double rm = ref.m()[i], rv = ref.v()[i];
    const double u = double(ref_after[i]) - before[i], uq = double(after[i]) - before[i];
    dm += (m[i] - rm) * (m[i] - rm), nm += rm * rm;
    dv += (v[i] - rv) * (v[i] - rv), nv += rv * rv;
    du += (uq - u) * (uq - u), nu += u * u;
    zeros += v[i] == 0 && rv > 0;
  }
  return {std::sqrt(dm / nm), std::sqrt(dv / nv), std::sqrt(du / nu), double(zeros) / double(n)};
}

void run(const Options& o) {
  AGOQ_CHECK(!o.data.empty(), "bench optim-error: --data (a prepared corpus, e.g. data/austen) is required");
  const TokenDataset train = TokenDataset::load(o.data + "/train.bin");
  LlamaConfig cfg;
  cfg.dim = o.dim, cfg.n_layers = o.layers, cfg.n_heads = 4, cfg.n_kv_heads = 4, cfg.ffn_dim = o.dim * 43 / 16;
  cfg.vocab_size = int(train.vocab_size()), cfg.max_seq_len = o.seq;
  LlamaModel model(cfg, o.batch, o.seq, ActPolicy::parse("fp32", cfg.n_layers));
  model.init_weights(1);
  DataLoader loader(train, o.seq, 1);
  const AdamWConfig base;
  AdamW ref(model.params(), base);
  // The variants' weights: written, read only at the report steps, where they start from the model's.
  ParamSet shadow(cfg, MemCategory::workspace, "bench.error"), before(cfg, MemCategory::workspace, "bench.error");
  std::vector<Variant> vs = variants();
  std::vector<std::unique_ptr<AdamW>> q8;
  for (const Variant& v : vs) {
    AdamWConfig c = base;
    c.state = OptimState::q8, c.q8 = v.fmt;
    q8.push_back(std::make_unique<AdamW>(model.params(), c));
  }
  const std::vector<int> report_at = {10, o.steps / 3, o.steps};
  std::vector<int32_t> in(size_t(o.batch) * o.seq), tgt(in.size());
  nlohmann::json out = nlohmann::json::array();
  for (int step = 1; step <= o.steps; ++step) {
    loader.next_batch(o.batch, in.data(), tgt.data());
    model.grads().zero();
    model.forward_backward(in.data(), tgt.data(), o.batch, o.seq);
    float* g = model.grads().data();
    const double norm = std::sqrt(grad_sum_squares(g, model.grads().size()));
    if (norm > 1.0) grad_scale(g, model.grads().size(), float(1.0 / norm));
    const float lr = lr_schedule(step, 3e-3f, 3e-4f, 30, o.steps);
    float* p = model.params().data();
    const size_t n = model.params().size();
    const bool report = std::find(report_at.begin(), report_at.end(), step) != report_at.end();
    if (report) std::copy(p, p + n, before.data());
    ref.step(p, g, lr, step);
    for (size_t k = 0; k < vs.size(); ++k) {
      if (report) std::copy(before.data(), before.data() + n, shadow.data());
      q8[k]->step(shadow.data(), g, lr, step);
      if (!report) continue;
      const Errors e = errors_of(ref, *q8[k], before.data(), p, shadow.data());
      out.push_back({{"variant", vs[k].name},
                     {"block", vs[k].fmt.block},
                     {"m_root", vs[k].fmt.m_root},
                     {"v_root", vs[k].fmt.v_root},
                     {"rounding", vs[k].fmt.rounding == QuantRounding::nearest ? "nearest" : "stochastic"},
                     {"step", step},
                     {"m_rel_err", e.m},
                     {"v_rel_err", e.v},
                     {"update_rel_err", e.update},
                     {"v_zero_share", e.v_zero},
                     {"state_bytes_per_value", double(adam_q8_bytes(1 << 20, vs[k].fmt.block)) / (1 << 20)}});
    }
  }
  if (o.json) {
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf(
      "8-bit Adam states vs fp32 after N steps of a dim-%d, %d-layer LLaMA on %s (%zu parameters, same "
      "gradients for all)\n",
      o.dim, o.layers, o.data.c_str(), model.params().size());
  std::printf("%-44s %5s %10s %10s %10s %10s %8s\n", "variant", "step", "m err", "v err", "update err", "v->0",
              "B/value");
  for (const auto& r : out)
    std::printf("%-44s %5d %10.4f %10.4f %10.4f %9.4f%% %8.4f\n", r["variant"].get<std::string>().c_str(),
                r["step"].get<int>(), r["m_rel_err"].get<double>(), r["v_rel_err"].get<double>(),
                r["update_rel_err"].get<double>(), 100 * r["v_zero_share"].get<double>(),
                r["state_bytes_per_value"].get<double>());
}

const CliCommand kBenchOptimError("bench", 61, [](CLI::App& bench) {
  auto o = std::make_shared<Options>();
  CLI::App* c = bench.add_subcommand("optim-error", "8-bit Adam state error vs fp32 per block size, mapping, rounding");
  c->add_option("--data", o->data, "prepared corpus (train.bin), e.g. data/austen")->required();
  c->add_option("--steps", o->steps, "training steps")->capture_default_str()->check(CLI::Range(10, 1000000));
  c->add_option("--batch", o->batch, "sequences per step")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--seq", o->seq, "tokens per sequence")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--dim", o->dim, "model width")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--layers", o->layers, "decoder layers")->capture_default_str()->check(cli_at_least(1));
  c->add_flag("--json", o->json, "print JSON");
  c->callback([o] { run(*o); });
});

}  // namespace
}  // namespace agoq
