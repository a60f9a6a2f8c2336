// `agoq bench capacity --mem-budget 4GiB --data DIR`: what fits a memory budget, as a user would check it. For the
// baseline (fp32 activations, fp32 gradients, fp32 AdamW) and for AGoQ (agoq activations, 8-bit gradient store,
// 8-bit AdamW states), the memory model (plan_memory_cpu_trainer) finds the most decoder layers at a fixed width and
// sequence, and the longest sequence at a fixed model; each is then confirmed by a real 3-step `agoq train` whose
// peak resident memory (the child's ru_maxrss, from wait4) must stay under the budget.
//
// The model predicts tracked memory; a process also holds what the tracker does not see (code, libraries, thread
// stacks, OpenBLAS buffers, allocator rounding and bookkeeping per buffer). Small calibration runs measure that
// overhead (a fixed part and a part per layer), and the searches keep prediction + overhead within --fill of the
// budget. A confirmation over the budget narrows the search's target by the ratio it measured and searches again
// (at most three searches), so every row printed is a run that was confirmed, or says NO.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/chart.h"
#include "cli/commands.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/paths.h"
#include "data/data_loader.h"
#include "plan/memory_model.h"

namespace agoq {
namespace {

namespace fs = std::filesystem;

struct Options {
  std::string data, budget = "4GiB", json_path, png;
  int dim = 256, heads = 8, ffn = 688, seq = 128, batch = 4;  // the layer search
  // The sequence search's model: deep and narrow, so the longest sequences stay short enough for the confirmation
  // runs' attention (its work grows with the square of the sequence) to take minutes, not hours.
  int seq_dim = 64, seq_heads = 4, seq_ffn = 172, seq_layers = 2048;
  double fill = 0.93;
  bool json = false, confirm = true;
};

struct System {
  const char* name;
  bool agoq;
};
constexpr System kSystems[] = {{"baseline", false}, {"agoq+q8", true}};

// The layer search's model (by_layers) or the sequence search's.
LlamaConfig config_of(const Options& o, bool by_layers, int layers, int seq, int vocab) {
  LlamaConfig c;
  c.dim = by_layers ? o.dim : o.seq_dim, c.n_heads = by_layers ? o.heads : o.seq_heads, c.n_kv_heads = c.n_heads;
  c.ffn_dim = by_layers ? o.ffn : o.seq_ffn, c.n_layers = layers, c.vocab_size = vocab, c.max_seq_len = seq;
  c.validate();
  return c;
}

size_t predicted(const LlamaConfig& cfg, const System& s, int batch, int seq) {
  PlanCpuOptions p;
  p.batch = batch, p.seq = seq, p.threads = 1;
  p.grad_q8 = p.optim_q8 = s.agoq;
  return plan_memory_cpu_trainer(cfg, ActPolicy::parse(s.agoq ? "agoq" : "fp32", cfg.n_layers), p).total();
}

// The largest x in [lo, hi] with fits(x) (fits monotone, fits(lo) assumed); lo - 1 when even lo does not fit.
int largest_fitting(int lo, int hi, const std::function<bool(int)>& fits) {
  if (!fits(lo)) return lo - 1;
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (fits(mid)) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

struct Measured {
  size_t max_rss = 0;
  double seconds = 0, cpu_seconds = 0;
};

// A 3-step `agoq train` of cfg on one thread; its peak resident memory from the kernel.
Measured train_measured(const Options& o, const LlamaConfig& cfg, const System& s, int batch, int seq) {
  const fs::path out = fs::temp_directory_path() / ("agoq_capacity_" + std::to_string(getpid()));
  // clang-format off
  std::vector<std::string> args = {fs::read_symlink("/proc/self/exe").string(), "train", "--data", o.data, "--out",
                                   out.string(), "--overwrite", "--quiet", "--steps", "3", "--warmup", "1",
                                   "--eval-every", "0", "--eval-batches", "1", "--dim", std::to_string(cfg.dim),
                                   "--layers", std::to_string(cfg.n_layers), "--heads", std::to_string(cfg.n_heads),
                                   "--ffn", std::to_string(cfg.ffn_dim), "--seq", std::to_string(seq), "--batch",
                                   std::to_string(batch)};
  // clang-format on
  if (s.agoq) args.insert(args.end(), {"--act-policy", "agoq", "--grad-store", "q8", "--optim-state", "q8"});
  else args.push_back("--baseline");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  AGOQ_CHECK(pid >= 0, "bench capacity: cannot fork");
  if (pid == 0) {
    setenv("OMP_NUM_THREADS", "1", 1), setenv("OPENBLAS_NUM_THREADS", "1", 1);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  rusage ru{};
  AGOQ_CHECK(wait4(pid, &status, 0, &ru) == pid, "bench capacity: wait4 failed");
  std::error_code ec;
  fs::remove_all(out, ec);
  AGOQ_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "bench capacity: the confirmation run (", s.name, ", ",
             cfg.n_layers, " layers, seq ", seq, ") failed with status ", status);
  Measured m;
  m.max_rss = size_t(ru.ru_maxrss) * 1024;
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  m.cpu_seconds =
      double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + 1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  return m;
}

// The corpus' vocabulary, and the longest window both its splits hold (a sequence needs seq + 1 tokens).
std::pair<int, int> data_shape(const std::string& dir) {
  const TokenDataset train = TokenDataset::load((fs::path(dir) / "train.bin").string());
  const TokenDataset val = TokenDataset::load((fs::path(dir) / "val.bin").string());
  const size_t tokens = std::min<size_t>(train.size(), val.size());
  AGOQ_CHECK(tokens >= 2, "bench capacity: ", dir, " holds fewer than 2 tokens");
  return {int(train.vocab_size()), int(std::min<size_t>(tokens - 1, size_t(1) << 20))};
}

void run(const Options& o) {
  const size_t budget = plan_parse_bytes(o.budget, "--mem-budget");
  AGOQ_CHECK(o.fill > 0 && o.fill <= 1, "--fill must be in (0, 1]");
  if (!o.json_path.empty())
    output_file_check_replaceable("--save-json", o.json_path, "an earlier bench capacity JSON",
                                  [](const std::string& p) { return output_file_is_json_with(p, "rows"); });
  if (!o.png.empty()) cli_chart_check("--png", o.png, "rows");
  AGOQ_CHECK(o.json_path.empty() || o.json_path != o.png, "--save-json and --png name the same file ", o.png);
  const std::pair<int, int> shape = data_shape(o.data);
  const int vocab = shape.first, longest = shape.second;  // named, not bound: the lambdas below use them (clang 14)
  // The untracked overhead, a fixed part and a part per layer (allocator rounding and bookkeeping of each layer's
  // buffers), from two small runs of each system (the larger of the two systems' parts).
  constexpr int kCalibrationLayers = 17;
  double fixed = 0, per_layer = 0;
  for (const System& s : kSystems) {
    double untracked[2];
    for (int k = 0; k < 2; ++k) {
      const LlamaConfig small = config_of(o, true, k ? kCalibrationLayers : 1, o.seq, vocab);
      untracked[k] = double(train_measured(o, small, s, 1, o.seq).max_rss) - double(predicted(small, s, 1, o.seq));
    }
    const double slope = std::max(0.0, (untracked[1] - untracked[0]) / (kCalibrationLayers - 1));
    per_layer = std::max(per_layer, slope), fixed = std::max(fixed, untracked[0] - slope);
  }
  auto overhead = [&](int layers) { return size_t(std::max(0.0, fixed + per_layer * layers)); };
  const double target = double(budget) * o.fill;
  nlohmann::json rows = nlohmann::json::array();
  for (const char* search : {"layers", "seq"})
    for (const System& s : kSystems) {
      const bool by_layers = std::string(search) == "layers";
      // Search under the target; a confirmation run over the budget (the overhead grows a little faster than the
      // small runs' line at hundreds of layers) narrows the target by what it measured and searches again.
      double limit_bytes = target;
      nlohmann::json r;
      for (int attempt = 1;; ++attempt) {
        auto fits = [&](int x) {
          const LlamaConfig c = config_of(o, by_layers, by_layers ? x : o.seq_layers, by_layers ? o.seq : x, vocab);
          return double(predicted(c, s, by_layers ? o.batch : 1, by_layers ? o.seq : x) + overhead(c.n_layers)) <=
                 limit_bytes;
        };
        const int best = largest_fitting(1, by_layers ? 4096 : longest, fits);
        AGOQ_CHECK(best >= 1, "bench capacity: nothing fits ", o.budget, " (", s.name, ", ", search, ")");
        const int layers = by_layers ? best : o.seq_layers, seq = by_layers ? o.seq : best;
        const int batch = by_layers ? o.batch : 1;
        const LlamaConfig cfg = config_of(o, by_layers, layers, seq, vocab);
        // What stopped the search: the budget, or the end of its range (the corpus' length for sequences).
        const char* limit = best == (by_layers ? 4096 : longest) ? (by_layers ? "layer range" : "corpus") : "memory";
        r = {{"search", search},
             {"system", s.name},
             {"limited_by", limit},
             {"layers", layers},
             {"seq", seq},
             {"batch", batch},
             {"dim", cfg.dim},
             {"params", cfg.param_count()},
             {"predicted_bytes", predicted(cfg, s, batch, seq) + overhead(layers)},
             {"searches", attempt}};
        if (!o.confirm) break;
        const Measured m = train_measured(o, cfg, s, batch, seq);
        r["max_rss_bytes"] = m.max_rss, r["under_budget"] = m.max_rss <= budget;
        r["seconds"] = m.seconds, r["cpu_seconds"] = m.cpu_seconds;
        if (m.max_rss <= budget || attempt == 3) break;
        limit_bytes *= target / double(m.max_rss);
      }
      rows.push_back(r);
    }
  const nlohmann::json j = {{"budget_bytes", budget},
                            {"overhead_fixed_bytes", fixed},
                            {"overhead_per_layer_bytes", per_layer},
                            {"fill", o.fill},
                            {"vocab", vocab},
                            {"rows", rows},
                            {"params_ratio", rows[1]["params"].get<double>() / rows[0]["params"].get<double>()},
                            {"seq_ratio", rows[3]["seq"].get<double>() / rows[2]["seq"].get<double>()}};
  if (!o.json_path.empty()) atomic_file_write(o.json_path, j.dump(2) + "\n");
  if (!o.png.empty()) cli_chart_write("--png", j, o.png, "capacity_chart.py", "rows");
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf(
      "what fits %s (vocab %d; one thread; untracked memory measured %s + %s per layer; the searches fill "
      "%.0f%%)\n",
      format_bytes(budget).c_str(), vocab, format_bytes(size_t(fixed)).c_str(), format_bytes(size_t(per_layer)).c_str(),
      100 * o.fill);
  std::printf("%-7s %-9s %5s %7s %7s %6s %12s %12s %12s %6s %8s %s\n", "search", "system", "dim", "layers", "seq",
              "batch", "params", "predicted", "peak RSS", "fits", "run s", "limited by");
  for (const auto& r : rows)
    std::printf("%-7s %-9s %5d %7d %7d %6d %11.1fM %12s %12s %6s %8.0f %s\n", r["search"].get<std::string>().c_str(),
                r["system"].get<std::string>().c_str(), r["dim"].get<int>(), r["layers"].get<int>(),
                r["seq"].get<int>(), r["batch"].get<int>(), r["params"].get<double>() / 1e6,
                format_bytes(r["predicted_bytes"].get<size_t>()).c_str(),
                r.contains("max_rss_bytes") ? format_bytes(r["max_rss_bytes"].get<size_t>()).c_str() : "-",
                r.contains("under_budget") ? (r["under_budget"].get<bool>() ? "yes" : "NO") : "-",
                r.value("seconds", 0.0), r["limited_by"].get<std::string>().c_str());
  std::printf(
      "AGoQ + q8 states: %.2fx the parameters (dim %d, seq %d, batch %d), %.2fx the sequence (dim %d, %d "
      "layers, batch 1)\n",
      j["params_ratio"].get<double>(), o.dim, o.seq, o.batch, j["seq_ratio"].get<double>(), o.seq_dim, o.seq_layers);
}

const CliCommand kBenchCapacity("bench", 62, [](CLI::App& bench) {
  auto o = std::make_shared<Options>();
  CLI::App* c = bench.add_subcommand("capacity",
                                     "largest model and longest sequence within a memory budget, baseline "
                                     "vs AGoQ + 8-bit AdamW states, confirmed by real runs' peak RSS");
  c->add_option("--data", o->data, "prepared corpus for the confirmation runs, e.g. data/austen")->required();
  c->add_option("--mem-budget", o->budget, "memory budget, e.g. 4GiB")->capture_default_str();
  c->add_option("--dim", o->dim, "model width of the layer search")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--heads", o->heads, "attention heads of the layer search")
      ->capture_default_str()
      ->check(cli_at_least(1));
  c->add_option("--ffn", o->ffn, "MLP hidden size of the layer search")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--seq", o->seq, "sequence of the layer search")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--batch", o->batch, "batch of the layer search (the sequence search uses 1)")
      ->capture_default_str()
      ->check(cli_at_least(1));
  c->add_option("--seq-dim", o->seq_dim, "width of the sequence search's model")
      ->capture_default_str()
      ->check(cli_at_least(1));
  c->add_option("--seq-heads", o->seq_heads, "attention heads of the sequence search's model")
      ->capture_default_str()
      ->check(cli_at_least(1));
  c->add_option("--seq-ffn", o->seq_ffn, "MLP hidden size of the sequence search's model")
      ->capture_default_str()
      ->check(cli_at_least(1));
  c->add_option("--seq-layers", o->seq_layers, "layers of the sequence search's model")
      ->capture_default_str()
      ->check(cli_at_least(1));
  c->add_option("--fill", o->fill, "share of the budget the searches may fill (prediction + overhead)")
      ->capture_default_str();
  c->add_flag("!--no-confirm", o->confirm, "only the memory model's answer, no confirmation runs");
  c->add_option("--save-json", o->json_path, "also write the JSON to this file");
  c->add_option("--png", o->png, "write a chart (scripts/capacity_chart.py)");
  c->add_flag("--json", o->json, "print JSON");
  c->callback([o] { run(*o); });
});

}  // namespace
}  // namespace agoq
