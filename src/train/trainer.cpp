#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "core/memory.h"
#include "core/rng.h"
#include "model/llama.h"
#include "train/checkpoint.h"
#include "train/data_loader.h"
#include "train/metrics.h"

namespace agoq {

namespace fs = std::filesystem;

namespace {

void options_validate(const TrainOptions& o) {
  AGOQ_CHECK(o.batch >= 1, "--batch must be >= 1 (got ", o.batch, ")");
  AGOQ_CHECK(o.seq >= 1, "--seq must be >= 1 (got ", o.seq, ")");
  AGOQ_CHECK(o.accum >= 1, "--accum must be >= 1 (got ", o.accum, ")");
  AGOQ_CHECK(o.steps >= 1, "--steps must be >= 1 (got ", o.steps, ")");
  AGOQ_CHECK(o.warmup >= 0, "--warmup must be >= 0");
  AGOQ_CHECK(std::isfinite(o.lr) && o.lr > 0, "--lr must be a positive number");
  AGOQ_CHECK(std::isfinite(o.min_lr) && o.min_lr >= 0 && o.min_lr <= o.lr, "--min-lr must be in [0, lr]");
  AGOQ_CHECK(o.clip > 0, "--clip must be positive");
  AGOQ_CHECK(o.eval_batches >= 1, "--eval-batches must be >= 1");
}

NamedTensors weights_of(ParamSet& p) {
  NamedTensors out;
  for (const ParamTensor& t : p.named()) out.push_back({t.name, t.shape, t.data});
  return out;
}

// Adam moments under "adam.m.<param>" / "adam.v.<param>", pointing into the optimizer's flat buffers.
NamedTensors optimizer_state_of(ParamSet& p, AdamW& adam) {
  NamedTensors out;
  for (const ParamTensor& t : p.named()) {
    const size_t off = size_t(t.data - p.data());
    out.push_back({"adam.m." + t.name, t.shape, adam.m().data() + off});
    out.push_back({"adam.v." + t.name, t.shape, adam.v().data() + off});
  }
  return out;
}

float evaluate(LlamaModel& model, const DataLoader& val, int B, int batches) {
  const int T = val.seq_len();
  std::vector<int32_t> in(size_t(B) * T), tgt(size_t(B) * T);
  const int n = val.val_batch_count(B, batches);
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    val.val_batch(B, batches, i, in.data(), tgt.data());
    sum += model.forward_loss(in.data(), tgt.data(), B, T);
  }
  return float(sum / n);
}

}  // namespace

TrainResult train_run(const TrainOptions& opt) {
  options_validate(opt);
  const fs::path data(opt.data_dir);
  TokenDataset train_set = TokenDataset::load((data / "train.bin").string());
  TokenDataset val_set = TokenDataset::load((data / "val.bin").string());

  LlamaConfig cfg = opt.model;
  cfg.vocab_size = int(train_set.vocab_size());
  if (cfg.max_seq_len < opt.seq) cfg.max_seq_len = opt.seq;
  if (!opt.resume.empty()) cfg = checkpoint_inspect(opt.resume).config;  // the checkpoint's shape wins
  cfg.validate();
  train_set.check_vocab(cfg.vocab_size);
  val_set.check_vocab(cfg.vocab_size);
  const int B = opt.batch, T = opt.seq;

  DataLoader loader(train_set, T, opt.seed);
  const DataLoader val_loader(val_set, T, opt.seed);
  LlamaModel model(cfg, B, T, ActPolicy::parse(opt.act_policy, cfg.n_layers));
  model.init_weights(opt.seed);
  AdamW adam(model.params(), opt.adam);
  ParamSet& params = model.params();
  ParamSet& grads = model.grads();

  long step = 0;
  if (!opt.resume.empty()) {
    const CheckpointMeta meta =
        checkpoint_load(opt.resume, cfg, weights_of(params), optimizer_state_of(params, adam));
    step = meta.step;
    loader.set_state(DataLoader::State::from_string(meta.trainer.at("loader").get<std::string>()));
  }
  AGOQ_CHECK(step < opt.steps, "checkpoint is already at step ", step, " of --steps ", opt.steps);

  fs::create_directories(opt.out_dir);
  const fs::path ckpt_dir = fs::path(opt.out_dir) / "ckpt";
  MetricsLog log((fs::path(opt.out_dir) / "metrics.jsonl").string(), !opt.resume.empty(), opt.steps, opt.log_every,
                 opt.quiet);
  // Each checkpoint is a new directory ckpt-step<N>; the link `ckpt` is then switched to it with one atomic
  // rename, and only after that is the previous one removed. A crash at any point leaves `ckpt` naming a
  // complete checkpoint.
  auto save = [&](long at_step) {
    const std::string name = "ckpt-step" + std::to_string(at_step);
    const fs::path dir = fs::path(opt.out_dir) / name;
    nlohmann::json trainer = {{"loader", loader.state().to_string()}, {"seed", opt.seed}};
    checkpoint_save(dir.string(), cfg, weights_of(params), optimizer_state_of(params, adam), trainer, at_step);
    const fs::path tok = data / "tokenizer.model";
    if (fs::exists(tok)) fs::copy_file(tok, dir / "tokenizer.model", fs::copy_options::overwrite_existing);
    const fs::path previous = fs::is_symlink(ckpt_dir) ? fs::read_symlink(ckpt_dir) : fs::path();
    const fs::path tmp_link = fs::path(opt.out_dir) / "ckpt.tmp";
    fs::remove(tmp_link);
    fs::create_directory_symlink(name, tmp_link);
    fs::rename(tmp_link, ckpt_dir);
    if (!previous.empty() && previous != name) fs::remove_all(fs::path(opt.out_dir) / previous);
    log.note("checkpoint: step " + std::to_string(at_step) + " -> " + ckpt_dir.string());
  };

  TrainResult result;
  std::vector<int32_t> in(size_t(B) * T), tgt(size_t(B) * T);
  const long first = step + 1;
  const long last = opt.stop_after > 0 ? std::min(opt.steps, step + opt.stop_after) : opt.steps;
  double tokens_total = 0, seconds_total = 0;
  for (step = first; step <= last; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    grads.zero();
    double loss = 0;
    for (int micro = 0; micro < opt.accum; ++micro) {
      loader.next_batch(B, in.data(), tgt.data());
      // Stochastic rounding of saved activations: fresh per micro-batch, reproducible from (seed, step).
      model.store().set_seed(philox4x32(opt.seed, uint64_t(step), uint64_t(micro))[0] | (uint64_t(step) << 32));
      loss += model.forward_backward(in.data(), tgt.data(), B, T, 1.0f / float(opt.accum)) / opt.accum;
    }
    const double grad_norm = std::sqrt(grad_sum_squares(grads.data(), grads.size()));
    AGOQ_CHECK(std::isfinite(loss) && std::isfinite(grad_norm), "training diverged at step ", step, ": loss ", loss,
               ", gradient norm ", grad_norm, " (try a lower --lr)");
    if (grad_norm > opt.clip) grad_scale(grads.data(), grads.size(), float(opt.clip / grad_norm));
    const float lr = lr_schedule(step, opt.lr, opt.min_lr, opt.warmup, opt.steps);
    adam.step(params.data(), grads.data(), lr, step);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double tokens = double(B) * T * opt.accum;
    tokens_total += tokens;
    seconds_total += dt;
    result.losses.push_back(float(loss));

    nlohmann::json rec = {{"step", step}, {"loss", loss}, {"lr", lr}, {"grad_norm", grad_norm},
                          {"tokens_per_s", tokens / dt}};
    if ((opt.eval_every > 0 && step % opt.eval_every == 0) || step == opt.steps) {
      const float val = evaluate(model, val_loader, B, opt.eval_batches);
      rec["val_loss"] = val;
      result.final_val_loss = val;
      char line[96];
      std::snprintf(line, sizeof line, "step %ld: val loss %.4f", step, val);
      log.note(line);
    }
    rec["memory"] = memory_json();
    log.step(step, rec);
    if (opt.ckpt_every > 0 && step % opt.ckpt_every == 0 && step != last) save(step);
  }
  result.last_step = last;
  save(last);
  log.finish();
  result.tokens_per_s = tokens_total / seconds_total;
  // Saved-activation bytes per token per layer under this policy, next to the bf16 and fp32 equivalents.
  auto per_token_layer = [&](const ActPolicy& p) {
    const size_t rows = size_t(B) * T;
    return double(act_store_bytes(p, cfg, rows, true) + act_store_bytes(p, cfg, rows, false)) / double(rows) /
           cfg.n_layers;
  };
  const double act_bytes = per_token_layer(model.store().policy());
  const double bf16_bytes = per_token_layer(ActPolicy::parse("baseline-bf16", cfg.n_layers));
  const double fp32_bytes = per_token_layer(ActPolicy::parse("fp32", cfg.n_layers));
  result.act_bytes_per_token_layer = act_bytes;
  if (!opt.quiet) {
    std::fprintf(stderr, "trained steps %ld..%ld at %.0f tokens/s\npeak memory by category:\n%s", first, last,
                 result.tokens_per_s, MemoryTracker::global().report().c_str());
    const auto tags = MemoryTracker::global().tag_peaks();
    auto tag = [&](const char* t) { return format_bytes(tags.count(t) ? tags.at(t) : 0); };
    std::fprintf(stderr,
                 "saved activations (%s): attention %s, other %s\n"
                 "  %.0f B per token per layer vs %.0f B in bf16 (%.2fx) and %.0f B in fp32 (%.2fx)\n",
                 model.store().policy().name.c_str(), tag("act.attention").c_str(), tag("act.other").c_str(), act_bytes,
                 bf16_bytes, act_bytes / bf16_bytes, fp32_bytes, act_bytes / fp32_bytes);
  }
  return result;
}

}  // namespace agoq
