// TrainSession::report: what the run did and where its memory went, next to what the unquantized baselines would
// need for the same run. The baselines come from the memory model (plan/memory_model.h), which matches the tracker
// exactly on single-stage CPU runs (tests/plan/test_memory_model.cpp).
#include <cstdio>
#include <string>

#include "plan/memory_model.h"
#include "train/session.h"

namespace agoq {

namespace {

constexpr int kCats = kMemCategoryCount;

// Saved-activation bytes per token per layer under a policy, on one of tp tensor-parallel ranks (sequence-parallel
// when sp; per token of the micro-batch).
double act_bytes_per_token_layer(const ActPolicy& p, const LlamaConfig& cfg, size_t rows, int tp, bool sp) {
  return double(act_store_bytes(p, cfg, rows, true, tp, sp) + act_store_bytes(p, cfg, rows, false, tp, sp)) /
         double(rows) / cfg.n_layers;
}

// Sum of each category's own peak: the figure the memory model predicts.
size_t categories_total(const size_t* bytes) {
  size_t t = 0;
  for (int c = 0; c < kCats; ++c) t += bytes[c];
  return t;
}

}  // namespace

void TrainSession::report(const TrainResult& r, long first) const {
  const int P = grid_.P, D = grid_.D;
  // A pipeline's stages differ (embedding, head, micro-batches in flight): every stage's peaks, gathered on all
  // ranks (collective) before anything is printed.
  std::vector<double> stage_peaks(size_t(P) * (kCats + 1), 0.0);
  if (grid_.pipe) {  // training's peaks, without the checkpoint's gather buffers
    double* mine = stage_peaks.data() + size_t(grid_.stage) * (kCats + 1);
    for (int c = 0; c < kCats; ++c) mine[c] = double(r.peak.bytes[c]);
    mine[kCats] = double(r.peak_total);
    grid_.pipe->allreduce_sum(stage_peaks.data(), stage_peaks.size());
  }
  if (opt_.quiet || !lead_) return;

  std::fprintf(stderr, "trained steps %ld..%ld at %.0f tokens/s", first, r.last_step, r.tokens_per_s);
  if (gpu_) std::fprintf(stderr, " on the GPU");
  if (D > 1)
    std::fprintf(stderr, " on %d ranks (grad store %s, all-reduce %s%s; %.1f%% of step time waiting on it)", D,
                 enum_name(kGradStoreNames, opt_.grad_store), enum_name(kAllreduceNames, opt_.allreduce),
                 opt_.zero ? ", ZeRO-1" : "", 100.0 * wait_total_ / seconds_total_);
  if (grid_.T > 1)
    std::fprintf(stderr, " with layers split over %d tensor-parallel ranks%s", grid_.T,
                 opt_.sp ? " (sequence-parallel)" : "");
  if (P > 1)
    std::fprintf(stderr, " on a %d-stage pipeline (1F1B, layers %s) x %d replica%s", P,
                 opt_.stage_layers.empty() ? "split evenly" : opt_.stage_layers.c_str(), D, D > 1 ? "s" : "");
  std::fprintf(stderr, "\n");
  if (timed_) {
    std::fprintf(stderr, "time split (--profile, rank 0):");
    for (int c = 0; c < kOpClassCount; ++c)
      std::fprintf(stderr, " %s %.1f%%,", op_class_label(OpClass(c)), 100 * op_seconds_.s[c] / seconds_total_);
    std::fprintf(stderr, " the rest (optimizer, gradient store, communication, data) %.1f%%\n",
                 100 * (1 - op_seconds_.total() / seconds_total_));
  }
  if (P > 1) report_stages(stage_peaks);
  const size_t rows = size_t(B_) * T_;
  const ActPolicy& policy = model_->store().policy();
  const int tp = grid_.T;
  const bool sp = opt_.sp;
  const double act = act_bytes_per_token_layer(policy, cfg_, rows, tp, sp);
  const double bf16 = act_bytes_per_token_layer(ActPolicy::parse("baseline-bf16", cfg_.n_layers), cfg_, rows, tp, sp);
  const double fp32 = act_bytes_per_token_layer(ActPolicy::parse("fp32", cfg_.n_layers), cfg_, rows, tp, sp);
  const auto tags = MemoryTracker::global().tag_peaks();
  auto tag = [&](const char* t) { return format_bytes(tags.count(t) ? tags.at(t) : 0); };
  std::fprintf(stderr,
               "saved activations (%s): attention %s, other %s\n"
               "  %.0f B per token per layer vs %.0f B in bf16 (%.2fx) and %.0f B in fp32 (%.2fx)\n",
               policy.name.c_str(), tag("act.attention").c_str(), tag("act.other").c_str(), act, bf16, act / bf16, fp32,
               act / fp32);
  report_memory(r);
}

void TrainSession::report_stages(const std::vector<double>& stage_peaks) const {
  const int P = grid_.P;
  std::fprintf(stderr, "peak memory per pipeline stage (first replica):\n  stage layers  in-flight");
  for (int c = 0; c < kCats; ++c) std::fprintf(stderr, " %13s", mem_category_name(MemCategory(c)));
  std::fprintf(stderr, " %13s\n", "total");
  for (int s = 0; s < P; ++s) {
    std::fprintf(stderr, "  %5d %2d..%-3d %9d", s, stages_[s].first_layer, stages_[s].end_layer - 1,
                 pipeline_in_flight(P, s, m_));
    for (int c = 0; c <= kCats; ++c)
      std::fprintf(stderr, " %13s", format_bytes(size_t(stage_peaks[size_t(s) * (kCats + 1) + c])).c_str());
    std::fprintf(stderr, "\n");
  }
}

// This rank's measured peak per category next to the fp32 baseline (fp32 activations, gradients, all-reduce, moments)
// and the bf16-store baseline (bf16 activations) of the same run, from the memory model. The token files the run
// holds in memory are the same for every configuration and count in each column's workspace.
void TrainSession::report_memory(const TrainResult& r) const {
  if (gpu_) return report_memory_gpu(r);
  PlanCpuOptions o = plan_options();
  o.grad_q8 = o.optim_q8 = false;  // the baselines keep fp32 gradients and fp32 AdamW moments
  const PlanMemory fp32 = plan_memory_cpu_trainer(cfg_, ActPolicy::parse("fp32", cfg_.n_layers), o);
  const PlanMemory bf16 = plan_memory_cpu_trainer(cfg_, ActPolicy::parse("baseline-bf16", cfg_.n_layers), o);
  const size_t data = MemoryTracker::global().tag_current("data");
  size_t base[2][kCats];
  for (int c = 0; c < kCats; ++c) {
    const size_t extra = MemCategory(c) == MemCategory::workspace ? data : 0;
    base[0][c] = fp32.bytes[c] + extra, base[1][c] = bf16.bytes[c] + extra;
  }
  std::fprintf(stderr, "peak memory by category%s   %14s %14s %14s\n", world_.size() > 1 ? " (rank 0)" : "", "this run",
               "fp32 baseline", "bf16 store");
  for (int c = 0; c < kCats; ++c)
    std::fprintf(stderr, "  %-22s %14s %14s %14s\n", mem_category_name(MemCategory(c)),
                 format_bytes(r.peak.bytes[c]).c_str(), format_bytes(base[0][c]).c_str(),
                 format_bytes(base[1][c]).c_str());
  const size_t mine = categories_total(r.peak.bytes.data()), t32 = categories_total(base[0]),
               t16 = categories_total(base[1]);
  std::fprintf(stderr, "  %-22s %14s %14s %14s\n", "total", format_bytes(mine).c_str(), format_bytes(t32).c_str(),
               format_bytes(t16).c_str());
  std::fprintf(stderr, "  this run needs %.2fx the memory of the fp32 baseline and %.2fx that of the bf16 store\n",
               double(mine) / double(t32), double(mine) / double(t16));
}

// The GPU's peaks per category (the device tracker's), and the host's total beside them. The CPU's memory model does
// not describe the device's workspaces, so no baseline columns here: the activation line above compares the stores.
void TrainSession::report_memory_gpu(const TrainResult& r) const {
  std::fprintf(stderr, "peak GPU memory by category (%s GEMMs)\n", enum_name(kGemmPrecisionNames, compute_.gemm));
  for (int c = 0; c < kCats; ++c)
    std::fprintf(stderr, "  %-22s %14s\n", mem_category_name(MemCategory(c)), format_bytes(r.peak.bytes[c]).c_str());
  std::fprintf(stderr, "  %-22s %14s   (host: %s)\n", "total", format_bytes(r.peak_total).c_str(),
               format_bytes(MemoryTracker::global().peak_total()).c_str());
}

}  // namespace agoq
