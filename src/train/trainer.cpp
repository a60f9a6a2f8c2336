#include "train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "comm/comm_check.h"
#include "core/error.h"
#include "core/memory.h"
#include "model/llama.h"
#include "parallel/data_parallel.h"
#include "parallel/grid.h"
#include "parallel/pipeline.h"
#include "train/checkpoint.h"
#include "train/dp_flags.h"
#include "data/data_loader.h"
#include "train/metrics.h"
#include "train/replan.h"

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
  AGOQ_CHECK(o.zero == 0 || o.zero == 1, "--zero must be 0 or 1 (got ", o.zero, ")");
  AGOQ_CHECK(o.replan_after >= 1, "--replan-after must be >= 1");
  AGOQ_CHECK(o.grad_rounding == "stochastic" || o.grad_rounding == "nearest",
             "--grad-rounding must be stochastic or nearest (got '", o.grad_rounding, "')");
}

NamedTensors weights_of(ParamSet& p) {
  NamedTensors out;
  for (const ParamTensor& t : p.named()) out.push_back({t.name, t.shape, t.data});
  return out;
}

// Size and FNV-1a of a file's bytes: ranks compare contents, not paths (machines may mount data differently).
std::string file_digest(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  AGOQ_CHECK(f, "cannot open ", p.string());
  std::vector<char> buf(1 << 20);
  uint64_t h = comm_hash_fnv1a({}), size = 0;
  while (f.read(buf.data(), std::streamsize(buf.size())) || f.gcount() > 0) {
    h = comm_hash_fnv1a(std::string_view(buf.data(), size_t(f.gcount())), h);
    size += uint64_t(f.gcount());
  }
  std::ostringstream os;
  os << p.filename().string() << ' ' << size << " bytes fnv " << std::hex << h;
  return os.str();
}

// Everything that must agree across ranks for their collectives to match and their replicas to stay equal.
std::string run_description(const TrainOptions& o, const LlamaConfig& cfg, const std::string& resume_commit) {
  std::ostringstream os;
  os << "model " << config_to_hf_json(cfg).dump() << "\nbatch " << o.batch << " seq " << o.seq << " accum " << o.accum
     << " steps " << o.steps << " warmup " << o.warmup << " lr " << o.lr << " min_lr " << o.min_lr << " clip "
     << o.clip << " adam " << o.adam.beta1 << ' ' << o.adam.beta2 << ' ' << o.adam.eps << ' ' << o.adam.weight_decay
     << " seed " << o.seed << " eval " << o.eval_every << ' ' << o.eval_batches << " ckpt " << o.ckpt_every
     << " stop_after " << o.stop_after << " act " << o.act_policy << " grad_store " << o.grad_store << " allreduce "
     << o.allreduce << " rounding " << o.grad_rounding << " zero " << o.zero << " pp " << o.pp << ' '
     << o.stage_layers << " mem_budget " << o.mem_budget << ' ' << o.replan_after << " resume " << resume_commit;
  return os.str();
}

// Checkpoints of a pipeline: every stage's first replica sends its weights and moments (tensor by tensor, in its
// named order) to stage 0, which then holds the whole model's views for checkpoint_save. `held` keeps the
// received tensors alive until the save.
void stages_gather_tensors(Communicator& pipe, const LlamaConfig& cfg, const std::vector<ModelStage>& stages,
                           NamedTensors& weights, NamedTensors& moments, std::vector<ParamSet>& held) {
  constexpr int kTag = 21;
  auto bytes = [](const NamedTensor& t) {
    size_t n = sizeof(float);
    for (int64_t d : t.shape) n *= size_t(d);
    return n;
  };
  if (pipe.rank() != 0) {
    for (const NamedTensor& t : weights) pipe.send(t.data, bytes(t), 0, kTag);
    for (const NamedTensor& t : moments) pipe.send(t.data, bytes(t), 0, kTag);
    return;
  }
  held.reserve(held.size() + 3 * stages.size());  // the references below must survive the next emplace_back
  for (int s = 1; s < int(stages.size()); ++s) {
    // Checkpoint-time only, tagged apart from training's buffers.
    ParamSet& w = held.emplace_back(cfg, stages[s], MemCategory::workspace, "ckpt.gather");
    ParamSet& m = held.emplace_back(cfg, stages[s], MemCategory::workspace, "ckpt.gather");
    ParamSet& v = held.emplace_back(cfg, stages[s], MemCategory::workspace, "ckpt.gather");
    const size_t first_weight = weights.size(), first_moment = moments.size();
    for (size_t i = 0; i < w.named().size(); ++i) {
      const ParamTensor& t = w.named()[i];
      weights.push_back({t.name, t.shape, t.data});
      moments.push_back({"adam.m." + t.name, t.shape, m.named()[i].data});
      moments.push_back({"adam.v." + t.name, t.shape, v.named()[i].data});
    }
    for (size_t i = first_weight; i < weights.size(); ++i) pipe.recv(weights[i].data, bytes(weights[i]), s, kTag);
    for (size_t i = first_moment; i < moments.size(); ++i) pipe.recv(moments[i].data, bytes(moments[i]), s, kTag);
  }
}

}  // namespace

TrainResult train_run(const TrainOptions& opt) {
  Communicator& world = opt.comm ? *opt.comm : comm_world();
  const bool lead = world.rank() == 0;
  // Flag errors are the same on every rank: one message.
  comm_agreed(world, [&] { options_validate(opt); });
  const ParallelGrid grid = comm_agreed(world, [&] { return parallel_grid_make(world, opt.pp); });
  Communicator& comm = *grid.dp;  // this stage's data-parallel group
  const int D = grid.D, P = grid.P, rank = grid.replica;
  const DpOptions dpo = dp_options_of(opt, grid.pipe);

  const fs::path data(opt.data_dir);
  TokenDataset train_set = TokenDataset::load((data / "train.bin").string());
  TokenDataset val_set = TokenDataset::load((data / "val.bin").string());

  LlamaConfig cfg = opt.model;
  cfg.vocab_size = int(train_set.vocab_size());
  if (cfg.max_seq_len < opt.seq) cfg.max_seq_len = opt.seq;
  std::string resume_commit = "-";
  if (!opt.resume.empty()) {
    const CheckpointMeta meta = checkpoint_inspect(opt.resume);
    cfg = meta.config;  // the checkpoint's shape wins
    resume_commit = meta.commit;
  }
  comm_agreed(world, [&] { cfg.validate(); });
  if (world.size() > 1) {  // before any other collective: mismatched ranks stop here with one message from rank 0
    comm_check_consistent(world, run_description(opt, cfg, resume_commit), "config");
    comm_check_consistent(world, file_digest(data / "train.bin") + "\n" + file_digest(data / "val.bin"), "data");
  }
  train_set.check_vocab(cfg.vocab_size);
  val_set.check_vocab(cfg.vocab_size);
  const int B = opt.batch, T = opt.seq, m = opt.accum;
  const std::vector<ModelStage> stages =
      comm_agreed(world, [&] { return model_stages_split(cfg, P, opt.stage_layers); });
  const ModelStage& stage = stages[grid.stage];

  // One global window stream, identical on every rank: each step draws D * m micro-batches and replica r trains
  // on r * m .. r * m + m - 1 (every stage of a replica the same ones). So D replicas x m equal 1 x D * m, and
  // one loader state resumes any rank.
  DataLoader loader(train_set, T, opt.seed);
  const DataLoader val_loader(val_set, T, opt.seed);
  const int in_flight = pipeline_in_flight(P, grid.stage, m);
  GradStore grads(cfg, stage, dpo.store);  // the model writes its gradients into it, dp reduces them from it
  LlamaModel model(cfg, B, T, ActPolicy::parse(opt.act_policy, cfg.n_layers), stage, in_flight, grads.model_storage());
  model.init_weights(opt.seed);
  DataParallel dp(comm, model.params(), grads, dpo);
  std::unique_ptr<Pipeline> pipeline = P > 1 ? std::make_unique<Pipeline>(*grid.pipe, model, B, T) : nullptr;
  ParamSet& params = model.params();

  long step = 0;
  if (!opt.resume.empty()) {
    const CheckpointMeta meta =
        checkpoint_load(opt.resume, cfg, weights_of(params), dp.moments_load_views(), /*part=*/P > 1);
    dp.moments_scatter();
    step = meta.step;
    loader.set_state(DataLoader::State::from_string(meta.trainer.at("loader").get<std::string>()));
  }
  AGOQ_CHECK(step < opt.steps, "checkpoint is already at step ", step, " of --steps ", opt.steps);
  // Peaks from here on describe training, not set-up transients (full-size moments read on a ZeRO resume).
  MemoryTracker::global().reset_peaks();

  if (lead) fs::create_directories(opt.out_dir);
  const fs::path ckpt_dir = fs::path(opt.out_dir) / "ckpt";
  MetricsLog log(lead ? (fs::path(opt.out_dir) / "metrics.jsonl").string() : std::string(), !opt.resume.empty(),
                 opt.steps, opt.log_every, opt.quiet || !lead);
  // Each checkpoint is a new directory ckpt-step<N>; the link `ckpt` is then switched to it with one atomic
  // rename, and only after that is the previous one removed. A crash at any point leaves `ckpt` naming a
  // complete checkpoint. Collective (ZeRO gathers the moments to a stage's first replica, a pipeline all stages'
  // tensors to rank 0); rank 0 writes.
  auto save = [&](long at_step) {
    dp.moments_gather();
    NamedTensors weights, moments;
    std::vector<ParamSet> held;
    if (rank == 0) {
      weights = weights_of(params), moments = dp.moments_views();
      if (P > 1) stages_gather_tensors(*grid.pipe, cfg, stages, weights, moments, held);
    }
    if (lead) {
      const std::string name = "ckpt-step" + std::to_string(at_step);
      const fs::path dir = fs::path(opt.out_dir) / name;
      nlohmann::json trainer = {{"loader", loader.state().to_string()}, {"seed", opt.seed},
                                {"world_size", world.size()}, {"pp", P}, {"accum", m},
                                {"grad_store", opt.grad_store}, {"allreduce", opt.allreduce}, {"zero", opt.zero}};
      checkpoint_save(dir.string(), cfg, weights, moments, trainer, at_step);
      const fs::path tok = data / "tokenizer.model";
      if (fs::exists(tok)) fs::copy_file(tok, dir / "tokenizer.model", fs::copy_options::overwrite_existing);
      const fs::path previous = fs::is_symlink(ckpt_dir) ? fs::read_symlink(ckpt_dir) : fs::path();
      const fs::path tmp_link = fs::path(opt.out_dir) / "ckpt.tmp";
      fs::remove(tmp_link);
      fs::create_directory_symlink(name, tmp_link);
      fs::rename(tmp_link, ckpt_dir);
      if (!previous.empty() && previous != name) fs::remove_all(fs::path(opt.out_dir) / previous);
      log.note("checkpoint: step " + std::to_string(at_step) + " -> " + ckpt_dir.string());
    }
    held.clear();
    dp.moments_release();
    if (world.size() > 1) world.barrier();  // the checkpoint is complete when any rank returns
  };
  // Validation on the first replica (replicas are identical), through the pipeline when there is one.
  auto validate = [&] {
    const int n = val_loader.val_batch_count(B, opt.eval_batches);
    double sum = 0;
    if (rank == 0) {
      if (pipeline) {
        sum = pipeline->forward_loss_sum(
            [&](int i, int32_t* in, int32_t* tgt) { val_loader.val_batch(B, opt.eval_batches, i, in, tgt); }, n, B, T);
      } else {
        std::vector<int32_t> in(size_t(B) * T), tgt(size_t(B) * T);
        for (int i = 0; i < n; ++i) {
          val_loader.val_batch(B, opt.eval_batches, i, in.data(), tgt.data());
          sum += model.forward_loss(in.data(), tgt.data(), B, T);
        }
      }
    }
    float val = float(sum / n);
    if (D > 1) comm.broadcast(&val, sizeof val, 0);
    return val;
  };
  // Dynamic bit allocation (train/replan.h): the stores calibrate sensitivities until the re-planning step.
  std::string replan_log;
  if (opt.mem_budget > 0)
    for (int i = model.store_count() - 1; i >= 0; --i) model.select_store(i), model.store().set_calibration(true);
  auto replan = [&] {
    const ReplanResult r = replan_activation_bits(model, grid, stages, m, size_t(B) * T, opt.mem_budget);
    if (!r.error.empty()) comm_agreed(world, [&] { fail(r.error); });  // the same on every rank: one message
    replan_log = r.log;
    log.note(r.log);
  };

  TrainResult result;
  const size_t rows = size_t(B) * T;
  std::vector<int32_t> in(rows * m), tgt(rows * m), skip_in(rows), skip_tgt(rows);
  const long first = step + 1;
  const long last = opt.stop_after > 0 ? std::min(opt.steps, step + opt.stop_after) : opt.steps;
  double tokens_total = 0, seconds_total = 0, wait_total = 0;
  for (step = first; step <= last; ++step) {
    if (step == opt.debug_exit_step && rank == opt.debug_exit_rank) {
      std::fprintf(stderr, "agoq: debug: rank %d exits with code 3 at step %ld (--debug-exit-at-step)\n", rank, step);
      std::fflush(stderr);
      _exit(3);
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (int g = 0; g < D * m; ++g) {
      const bool mine = g / m == rank;  // this replica's micro-batches
      const size_t at = size_t(g % m) * rows;
      loader.next_batch(B, mine ? in.data() + at : skip_in.data(), mine ? tgt.data() + at : skip_tgt.data());
    }
    const float lr = lr_schedule(step, opt.lr, opt.min_lr, opt.warmup, opt.steps);
    const std::vector<MicroBatchRun> runs = dp.step_begin(step, m);
    const double loss_sum = pipeline ? pipeline->run(in.data(), tgt.data(), B, T, runs)
                                     : model.forward_backward_micro_batches(in.data(), tgt.data(), B, T, runs);
    const DpStepResult r = dp.step_end(lr, loss_sum);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double tokens = double(rows) * m * D;
    tokens_total += tokens;
    seconds_total += dt;
    wait_total += r.wait_s;
    result.losses.push_back(float(r.loss));
    result.grad_norms.push_back(float(r.grad_norm));

    nlohmann::json rec = {{"step", step}, {"loss", r.loss}, {"lr", lr}, {"grad_norm", r.grad_norm},
                          {"tokens_per_s", tokens / dt}};
    if (D > 1) rec["comm_wait_s"] = r.wait_s;
    if ((opt.eval_every > 0 && step % opt.eval_every == 0) || step == opt.steps) {
      const float val = validate();
      rec["val_loss"] = val;
      result.final_val_loss = val;
      char line[96];
      std::snprintf(line, sizeof line, "step %ld: val loss %.4f", step, val);
      log.note(line);
    }
    rec["memory"] = memory_json();
    log.step(step, rec);
    if (opt.ckpt_every > 0 && step % opt.ckpt_every == 0 && step != last) save(step);
    if (opt.mem_budget > 0 && step == first + opt.replan_after - 1) replan();
  }
  result.last_step = last;
  result.replan_log = replan_log;
  result.peak = MemoryTracker::global().peak_per_category();
  result.peak_total = MemoryTracker::global().peak_total();
  save(last);
  log.finish();
  result.tokens_per_s = tokens_total / seconds_total;
  // Saved-activation bytes per token per layer under this policy, next to the bf16 and fp32 equivalents.
  auto per_token_layer = [&](const ActPolicy& p) {
    return double(act_store_bytes(p, cfg, rows, true) + act_store_bytes(p, cfg, rows, false)) / double(rows) /
           cfg.n_layers;
  };
  const double act_bytes = per_token_layer(model.store().policy());
  const double bf16_bytes = per_token_layer(ActPolicy::parse("baseline-bf16", cfg.n_layers));
  const double fp32_bytes = per_token_layer(ActPolicy::parse("fp32", cfg.n_layers));
  result.act_bytes_per_token_layer = act_bytes;
  // A pipeline's stages differ (embedding, head, micro-batches in flight): every stage's peaks, per category.
  std::vector<double> stage_peaks(size_t(P) * (kMemCategoryCount + 1), 0.0);
  if (grid.pipe) {  // training's peaks, without the checkpoint's gather buffers
    double* mine = stage_peaks.data() + size_t(grid.stage) * (kMemCategoryCount + 1);
    for (int c = 0; c < kMemCategoryCount; ++c) mine[c] = double(result.peak.bytes[c]);
    mine[kMemCategoryCount] = double(result.peak_total);
    grid.pipe->allreduce_sum(stage_peaks.data(), stage_peaks.size());
  }
  if (!opt.quiet && lead) {
    std::fprintf(stderr, "trained steps %ld..%ld at %.0f tokens/s", first, last, result.tokens_per_s);
    if (D > 1)
      std::fprintf(stderr, " on %d ranks (grad store %s, all-reduce %s%s; %.1f%% of step time waiting on it)", D,
                   opt.grad_store.c_str(), opt.allreduce.c_str(), opt.zero ? ", ZeRO-1" : "",
                   100.0 * wait_total / seconds_total);
    if (P > 1)
      std::fprintf(stderr, " on a %d-stage pipeline (1F1B, layers %s) x %d replica%s", P,
                   opt.stage_layers.empty() ? "split evenly" : opt.stage_layers.c_str(), D, D > 1 ? "s" : "");
    std::fprintf(stderr, "\npeak memory by category%s:\n%s", world.size() > 1 ? " (rank 0)" : "",
                 MemoryTracker::global().report().c_str());
    if (P > 1) {
      std::fprintf(stderr, "peak memory per pipeline stage (first replica):\n  stage layers  in-flight");
      for (int c = 0; c < kMemCategoryCount; ++c) std::fprintf(stderr, " %13s", mem_category_name(MemCategory(c)));
      std::fprintf(stderr, " %13s\n", "total");
      for (int r = 0; r < P; ++r) {
        std::fprintf(stderr, "  %5d %2d..%-3d %9d", r, stages[r].first_layer, stages[r].end_layer - 1,
                     pipeline_in_flight(P, r, m));
        for (int c = 0; c <= kMemCategoryCount; ++c)
          std::fprintf(stderr, " %13s", format_bytes(size_t(stage_peaks[size_t(r) * (kMemCategoryCount + 1) + c])).c_str());
        std::fprintf(stderr, "\n");
      }
    }
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
