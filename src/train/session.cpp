#include "train/session.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "comm/comm_check.h"
#include "core/error.h"
#include "core/memory_json.h"
#include "core/stop_signal.h"
#include "data/prepared_dir.h"
#include "data/tokenizer.h"
#include "formats/checkpoint.h"
#include "formats/model_source.h"
#include "plan/memory_model.h"
#include "train/forward_backward.h"
#include "train/replan.h"
#include "train/run_dir.h"
#if AGOQ_HAVE_CUDA
#include "cuda_train/step_cuda.h"
#endif

namespace agoq {

namespace fs = std::filesystem;

namespace {

// Flag errors are the same on every rank: one message. Then the grid, also agreed.
ParallelGrid grid_of_validated(Communicator& world, const TrainOptions& o) {
  comm_agreed(world, [&] { train_options_validate(o); });
  return comm_agreed(world, [&] { return parallel_grid_make(world, o.pp, o.tp); });
}

}  // namespace

TrainSession::TrainSession(const TrainOptions& opt)
    : opt_(opt),
      world_(opt.comm ? *opt.comm : comm_world()),
      lead_(world_.rank() == 0),
      grid_(grid_of_validated(world_, opt)),
      step_options_(train_cpu_step_options(opt, grid_.pipe, grid_.tp)),
      B_(opt.batch),
      T_(opt.seq),
      m_(opt.accum) {
  comm_lead_agreed(world_, [&] { out_dir_claim(); });
  data_load();
  config_resolve();
  model_build();
  comm_agreed(world_, [&] { eval_tasks_prepare(); });
  if (eval_tasks_.empty()) data_tokenizer_.reset();  // from here only --eval-task encodes with it
  if (!opt_.resume.empty()) resume();
  else if (init_source_) weights_init_from();
  model_->backend().weights_changed();  // the bf16 copies of the weights are made from what was loaded
  // Peaks from here on describe training, not set-up transients (full-size moments read on a ZeRO resume).
  MemoryTracker::global().reset_peaks();
  if (gpu_) MemoryTracker::of(MemDevice::cuda).reset_peaks();
  log_ =
      std::make_unique<MetricsLog>(lead_ ? (fs::path(opt_.out_dir) / "metrics.jsonl").string() : std::string(),
                                   opt_.resume.empty() ? -1 : step_, opt_.steps, opt_.log_every, opt_.quiet || !lead_);
  if (tboard_) log_->tensorboard_attach(std::move(tboard_));
  log_->note("compute: " + compute_.why);
  if (!block_notes_.empty()) log_->note(block_notes_);
  // Dynamic bit allocation (train/replan.h): the stores calibrate sensitivities until the re-planning step.
  if (opt_.mem_budget > 0)
    for (int i = 0; i < model_->store_count(); ++i) model_->store(i).set_calibration(true);
}

// One run per --out (its lock, held until the session ends), and nothing there that agoq would misuse
// (train/run_dir.h), then the --tensorboard folder's new events file. A run continues its checkpoint's identity only
// when it resumes inside --out.
void TrainSession::out_dir_claim() {
  run_dir_check_sources(opt_.out_dir, opt_.resume, opt_.init_from);
  out_lock_ = DirLock::acquire(opt_.out_dir, "--out");
  run_dir_check(opt_.out_dir, opt_.overwrite, opt_.resume);
  who_.overwrite = opt_.overwrite;
  who_.run = run_id_new();
  if (!opt_.resume.empty()) {
    const CheckpointMarker m = checkpoint_marker_read(opt_.resume);
    who_.resume_commit = m.commit;
    std::error_code ec;
    const bool inside =
        fs::equivalent(fs::weakly_canonical(opt_.resume, ec).parent_path(), fs::weakly_canonical(opt_.out_dir, ec), ec);
    if (inside && !m.run.empty()) who_.run = m.run;
  }
  // A bad --tensorboard folder is refused here, before the data is read; the file is new (nothing replaced).
  if (!opt_.tensorboard.empty()) tboard_ = std::make_unique<TensorBoardWriter>(opt_.tensorboard);
}

void TrainSession::data_load() {
  const fs::path data(opt_.data_dir);
  prepared_dir_check_complete(data);
  train_set_ = TokenDataset::load((data / "train.bin").string());
  val_set_ = TokenDataset::load((data / "val.bin").string());
  // The tokenizer the checkpoints will carry must be the one that made the tokens (`agoq sample` decodes with it).
  if (fs::exists(data / "tokenizer.model") || fs::exists(data / "tokenizer.json")) {
    data_tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::load(data.string()));
    const int pieces = data_tokenizer_->vocab_size();
    AGOQ_CHECK(size_t(pieces) == train_set_.vocab_size(), "--data ", data.string(), ": its tokenizer has ", pieces,
               " tokens but train.bin's header says vocab ", train_set_.vocab_size(),
               ": the token files were not made with this tokenizer (run `agoq prepare` again)");
  }
}

// The model's shape: the flags' (vocabulary from the data), or the checkpoint's when resuming. Then every rank
// must run the same config on the same data, checked before any other collective.
void TrainSession::config_resolve() {
  cfg_ = opt_.model;
  cfg_.vocab_size = int(train_set_.vocab_size());
  if (cfg_.max_seq_len < T_) cfg_.max_seq_len = T_;
  if (!opt_.resume.empty()) {
    const CheckpointMeta meta = checkpoint_inspect(opt_.resume);
    const std::string disagree = model_flags_disagreeing(opt_, meta.config);
    AGOQ_CHECK(disagree.empty(), "--resume ", opt_.resume, ": ", disagree,
               "; a resumed run keeps the checkpoint's model: drop the flag (or start a new run)");
    cfg_ = meta.config;
    resume_commit_ = meta.commit;
    hf_config_ = meta.hf_config;
  }
  if (!opt_.init_from.empty()) comm_agreed(world_, [&] { init_source_open(); });
  comm_agreed(world_, [&] { cfg_.validate(); });
  if (world_.size() > 1) {  // mismatched ranks stop here with one message from rank 0
    const fs::path data(opt_.data_dir);
    comm_check_consistent(world_, train_run_description(opt_, cfg_, resume_commit_), "config");
    comm_check_consistent(world_, file_digest(data / "train.bin") + "\n" + file_digest(data / "val.bin"), "data");
  }
  // A model not made here may have more embedding rows than its tokenizer has tokens (padding).
  const bool padded = !opt_.init_from.empty() || !opt_.resume.empty();
  try {
    train_set_.check_vocab(cfg_.vocab_size, padded);
    val_set_.check_vocab(cfg_.vocab_size, padded);
  } catch (const Error& e) {
    if (padded) fail(e.what(), ": prepare the data with the model's own tokenizer (agoq prepare --tokenizer MODEL)");
    // A fresh model takes train.bin's vocabulary, unless --config gives one.
    if (std::ranges::find(opt_.model_flags, "--config") != opt_.model_flags.end())
      fail(e.what(), ": prepare the data with --vocab-size ", cfg_.vocab_size, ", or take vocab_size out of --config");
    fail(e.what(), ": train.bin and val.bin come from different prepares: prepare the data again");
  }
  stages_ = comm_agreed(world_, [&] {
    std::vector<ModelStage> stages = model_stages_split(cfg_, grid_.P, opt_.stage_layers);
    for (ModelStage& s : stages) s = model_stage_shard(cfg_, s, grid_.T, grid_.tp_rank, opt_.sp);  // this rank's shard
    if (opt_.sp) model_sp_check(grid_.T, B_, T_);
    return stages;
  });
  blocks_isolate_replicated();
}

// --init-from: the pretrained model's shape (a model flag that disagrees is refused) and its config.json, which the
// checkpoints carry on (train/session_checkpoint.cpp); the data must be its tokenizer's tokens.
void TrainSession::init_source_open() {
  const std::string& src = opt_.init_from;
  init_source_ = model_reader_open(src);
  const LlamaConfig& c = init_source_->config();
  const std::string disagree = model_flags_disagreeing(opt_, c, "model");
  AGOQ_CHECK(disagree.empty(), "--init-from ", src, ": ", disagree,
             "; a fine-tune keeps the model's shape: drop "
             "the flag");
  AGOQ_CHECK(T_ <= c.max_seq_len, "--seq ", T_, " is longer than the ", c.max_seq_len, " positions of --init-from ",
             src, " (max_position_embeddings)");
  const std::string& data = opt_.data_dir;
  AGOQ_CHECK(data_tokenizer_, "--data ", data,
             " holds no tokenizer, so its tokens cannot be checked against --init-from ", src,
             "'s: prepare it with `agoq prepare --tokenizer ", src, "`");
  const Tokenizer &ours = *data_tokenizer_, theirs = init_source_->tokenizer();
  auto describe = [](const Tokenizer& t) {
    return std::string(t.kind_name()) + ", " + std::to_string(t.vocab_size()) + " tokens, identity " + t.identity();
  };
  AGOQ_CHECK(ours.identity() == theirs.identity(), "--data ", data, " was prepared with another tokenizer (",
             describe(ours), ") than --init-from ", src, " has (", describe(theirs),
             "): prepare it with `agoq "
             "prepare --tokenizer ",
             src, "`");
  cfg_ = c;
  hf_config_ = init_source_->hf_config();
}

// Under tensor parallelism the norms' copies must get the same bits on every shard (their gradients, reductions and
// 8-bit moments): the quantization blocks shrink until no block holds a norm and a shard's slice (arch/params.h).
// Every model whose width is a multiple of 256 keeps the defaults; the small ones get a note, or a refusal when
// the blocks would be smaller than the 8-bit formats allow.
void TrainSession::blocks_isolate_replicated() {
  std::vector<ModelStage> all = model_stages_split(cfg_, grid_.P, opt_.stage_layers);  // every stage: one format
  for (ModelStage& s : all) s = model_stage_shard(cfg_, s, grid_.T, 0, opt_.sp);
  const bool grad_q8 = step_options_.store.kind == GradStoreKind::q8 || step_options_.reduce == GradReduce::q8;
  const bool optim_q8 = step_options_.adam.state == OptimState::q8;
  auto isolate = [&](int& block, const char* what, int least) {
    const int b = model_block_isolating_replicated(cfg_, all, block);
    if (b == block) return;
    comm_agreed(world_, [&] {
      AGOQ_CHECK(b >= least, "--tp ", grid_.T, ": ", what, " blocks of ", block, " values would mix the norms (dim ",
                 cfg_.dim, ") with the shards' slices, and the largest block that does not (", b,
                 ") is below the format's ", least, ": use a --dim that is a multiple of ", least, " or ",
                 what == std::string("8-bit gradient") ? "--grad-store fp32 --allreduce mpi" : "--optim-state fp32");
    });
    block_notes_ += std::string(block_notes_.empty() ? "" : "; ") + what + " blocks of " + std::to_string(b) +
                    " values (not " + std::to_string(block) + "), so no block mixes a norm with a shard's slice";
    block = b;
  };
  if (grad_q8) isolate(step_options_.store.block, "8-bit gradient", 32);
  if (optim_q8) isolate(step_options_.adam.q8.block, "8-bit optimizer", 32);
  if (optim_q8 && step_options_.zero)  // ZeRO's shards start on gradient blocks, which the moments' must divide
    step_options_.adam.q8.block = std::min(step_options_.adam.q8.block, step_options_.store.block);
}

PlanCpuOptions TrainSession::plan_options() const {
  PlanCpuOptions o;
  o.batch = B_, o.seq = T_, o.zero = step_options_.zero, o.dp = grid_.D;
  o.reduce = step_options_.reduce, o.dp_one_host = grid_.dp->one_host(), o.bucket_bytes = step_options_.bucket_bytes;
  o.grad_q8 = step_options_.store.kind == GradStoreKind::q8;
  o.grad_block = step_options_.store.block, o.lm_head_pieces = step_options_.store.lm_head_pieces;
  o.optim_q8 = step_options_.adam.state == OptimState::q8, o.optim_block = step_options_.adam.q8.block;
  o.pp = grid_.P, o.stage = stages_[grid_.stage], o.in_flight = pipeline_in_flight(grid_.P, grid_.stage, m_);
  o.gemm_bf16 = compute_.gemm == GemmPrecision::bf16, o.bf16_weights = opt_.bf16_weights;
  return o;
}

// The step's token ids (inputs and targets of its m micro-batches), on either device: --accum can ask for more than
// any machine has (counted in double: the product of three ints overflows 64 bits).
void TrainSession::step_ids_check() const {
  const size_t have = memory_physical_bytes();
  if (have == 0) return;
  const double ids = 2.0 * sizeof(int32_t) * double(B_) * double(T_) * double(m_);
  AGOQ_CHECK(ids <= double(have), "--batch ", B_, " x --seq ", T_, " x --accum ", m_, " tokens per step need ",
             format_bytes(size_t(std::min(ids, 1e19))), " for their token ids alone; this machine has ",
             format_bytes(have), ": lower --accum");
}

// The memory model first: a run this machine cannot hold stops with one line before anything is allocated.
void TrainSession::memory_check() const {
  const size_t have = memory_physical_bytes();
  if (have == 0) return;
  const PlanMemory need =
      plan_memory_cpu_trainer(cfg_, ActPolicy::parse(opt_.act_policy, cfg_.n_layers), plan_options());
  const size_t fixed = need[MemCategory::weights] + need[MemCategory::gradients] + need[MemCategory::optimizer];
  AGOQ_CHECK(fixed <= have, "this model (", cfg_.param_count(), " parameters) needs ", format_bytes(fixed),
             " per rank for weights, gradients and AdamW states alone; this machine has ", format_bytes(have));
  AGOQ_CHECK(need.total() <= have, "this run needs about ", format_bytes(need.total()), " per rank (activations ",
             format_bytes(need[MemCategory::activations]), ", workspace ", format_bytes(need[MemCategory::workspace]),
             "); this machine has ", format_bytes(have), ": lower --batch or --seq");
}

void TrainSession::model_build() {
  comm_agreed(world_, [&] { step_ids_check(); });
  if (opt_.device == TrainDevice::cuda) return model_build_gpu();
  compute_ = comm_agreed(world_, [&] { return model_compute_choose(opt_.compute, false); });
  comm_agreed(world_, [&] {
    AGOQ_CHECK(!step_options_.store.lm_head_pieces || cfg_.tie_embeddings,
               "--lm-head-grad pieces is for tied "
               "embeddings: this model's lm_head is its own tensor, whose gradient the store holds whole");
    memory_check();
  });
  // One global window stream, identical on every rank: each step draws D * m micro-batches and replica r trains
  // on r * m .. r * m + m - 1 (every stage of a replica the same ones). So D replicas x m equal 1 x D * m, and
  // one loader state resumes any rank.
  batches_allocate();
  const int in_flight = pipeline_in_flight(grid_.P, grid_.stage, m_);
  grads_ = std::make_unique<GradStore>(cfg_, stages_[grid_.stage], step_options_.store);  // the model writes into it
  if (grid_.tp) tensor_group_ = std::make_unique<CommTensorGroup>(*grid_.tp);
  if (compute_.gemm == GemmPrecision::bf16) cpu_bf16_ = model_backend_cpu_bf16(opt_.bf16_weights);
  ModelBackend& cpu = cpu_bf16_ ? *cpu_bf16_ : model_backend_cpu();
  if (opt_.profile) timed_ = std::make_unique<TimedBackend>(cpu);
  model_make(stages_[grid_.stage], in_flight, grads_->model_storage(), tensor_group_.get(), timed_ ? *timed_ : cpu);
  if (timed_ && stages_[grid_.stage].head) {
    const ShardDims d = model_shard_dims(cfg_, stages_[grid_.stage]);
    timed_->head_weights_are(model_->params().lm_head, size_t(d.V) * d.C);
  }
  auto cpu_step = std::make_unique<CpuStep>(*grid_.dp, model_->params(), *grads_, step_options_);
  cpu_step_ = cpu_step.get();
  engine_ = std::move(cpu_step);
  if (grid_.P > 1) pipeline_ = std::make_unique<Pipeline>(*grid_.pipe, *model_, B_, T_);
}

// The model of this rank's stage on `backend`, its weights initialised (a resume or --init-from overwrites them).
void TrainSession::model_make(const ModelStage& stage, int in_flight, const GradStoreView& grad_store_view,
                              TensorGroup* tensor_group, ModelBackend& backend) {
  model_ = std::make_unique<LlamaModel>(cfg_, B_, T_, ActPolicy::parse(opt_.act_policy, cfg_.n_layers), stage,
                                        in_flight, grad_store_view, tensor_group, backend);
  model_->init_weights(opt_.seed);
}

// One GPU in one process (docs/cuda.md): the model on the CUDA backend, its gradients in its own fp32 buffer or in
// the device's 8-bit store, and the optimizer step on the device; the flags that need more (ranks, 8-bit moments)
// were refused by train_options_validate.
void TrainSession::model_build_gpu() {
#if AGOQ_HAVE_CUDA
  AGOQ_CHECK(world_.size() == 1, "--device cuda trains on one GPU in one process (", world_.size(),
             " ranks here): data parallelism over GPUs is not built yet");
  compute_ = model_compute_choose(opt_.compute, true);
  auto gpu = std::make_unique<CudaBackend>(compute_.gemm);
  CudaBackend& backend = *gpu;
  gpu_ = std::move(gpu);
  batches_allocate();
  const ModelStage whole = model_stage_whole(cfg_);
  std::unique_ptr<CudaGradStore> q8;  // --grad-store q8: the model writes into its scratch
  if (step_options_.store.kind == GradStoreKind::q8)
    q8 = std::make_unique<CudaGradStore>(backend, cfg_, whole, step_options_.store.block, step_options_.store.rounding);
  model_make(whole, 1, q8 ? GradStoreView(q8->model_storage()) : GradStoreView(), nullptr, backend);
  engine_ = std::make_unique<CudaStep>(*model_, backend, std::move(q8), step_options_.adam, opt_.clip, opt_.seed);
#else
  fail("--device cuda: this agoq was built without the CUDA backend (no nvcc at configure time, or -DAGOQ_CUDA=OFF)");
#endif
}

// A shard reads the whole weights of its stage and keeps its slices (train/session_checkpoint.cpp). The moments, in
// the form the checkpoint has (fp32 / 8-bit), converted by the scatter when this run keeps the other: fp32 ones
// whole like the weights; 8-bit ones of the same TP degree, this shard's own (bit for bit in the same format);
// 8-bit ones of another TP degree decoded into whole fp32 tensors first.
void TrainSession::resume() {
  const nlohmann::json trainer = checkpoint_inspect(opt_.resume).trainer;
  const MomentsForm file = moments_form_of(trainer);
  const int file_tp = moments_tp_of(trainer, cfg_);
  const bool q8 = file.state == OptimState::q8, part = grid_.P > 1;
  NamedTensors weights = engine_->weights_views();
  WholeTensors whole_weights = whole_tensors_of(weights, model_->params(), grid_.T);
  CheckpointMeta meta;
  if (q8 && file_tp == grid_.T && !gpu_) {  // the 8-bit moments as they are (the GPU keeps fp32 ones)
    NamedTensors moments = engine_->moments_load_views(file);
    if (grid_.T > 1) moments = moments_of_shard(std::move(moments), grid_.tp_rank);
    meta = checkpoint_load(opt_.resume, cfg_, whole_weights.views, moments, part || grid_.T > 1);
  } else {
    NamedTensors moments = engine_->moments_load_views(q8 ? MomentsForm{} : file);
    WholeTensors whole_moments = whole_tensors_of(moments, model_->params(), grid_.T);
    if (q8) {
      Q8FileMoments stored(cfg_, stages_[grid_.stage], file, file_tp);
      meta = checkpoint_load(opt_.resume, cfg_, whole_weights.views, stored.tensors, part);
      stored.decode(cfg_, whole_moments.views);
    } else {
      meta = checkpoint_load(opt_.resume, cfg_, whole_weights.views, whole_moments.views, part);
    }
    whole_tensors_slice(whole_moments, moments, grid_.tp_rank);
  }
  whole_tensors_slice(whole_weights, weights, grid_.tp_rank);
  engine_->moments_scatter();
  step_ = step_resumed_ = meta.step;
  loader_->set_state(resume_loader_state(meta, opt_.resume));
  AGOQ_CHECK(step_ < opt_.steps, "checkpoint is already at step ", step_, " of --steps ", opt_.steps);
}

// --init-from: the pretrained weights in place of the initialisation (whole tensors read, this shard's slices kept;
// a pipeline stage reads its own), the moments zero as in any fresh run.
void TrainSession::weights_init_from() {
  NamedTensors weights = engine_->weights_views();
  WholeTensors whole = whole_tensors_of(weights, model_->params(), grid_.T);
  model_reader_load(*init_source_, whole.views);
  whole_tensors_slice(whole, weights, grid_.tp_rank);
  engine_->moments_scatter();
  init_source_.reset();
}

// Every rank learns whether any rank was asked to stop (one small all-reduce per step), so all stop at one step.
int TrainSession::stop_agreed() {
  int sig = stop_signal_received();
  if (world_.size() > 1) world_.allreduce(&sig, &sig, 1, CommDtype::i32, CommOp::max);
  return sig;
}

// What a rank says when a stop signal arrives. Under mpirun that is also how a lost peer shows (mpirun ends the
// job): then no checkpoint can be written, so the note names the newest good one (updated after each checkpoint).
std::string TrainSession::stop_note(long good_step) const {
  const std::string ckpt = (fs::path(opt_.out_dir) / "ckpt").string();
  const std::string good = good_step < 0 ? std::string("there is no checkpoint of this run yet")
                                         : "the last good checkpoint is step " + std::to_string(good_step) + " (" +
                                               (good_step == step_resumed_ ? opt_.resume : ckpt) + ")";
  if (world_.size() == 1)
    return "\nagoq: stop signal received: finishing this step, then a checkpoint (a second signal stops at once; " +
           good + ")\n";
  return "\nagoq: rank " + std::to_string(world_.rank()) + "/" + std::to_string(world_.size()) +
         ": stop signal received (from the scheduler, or from mpirun because another rank failed or a peer was lost: "
         "its report names that rank): finishing this step, then a checkpoint; if a peer is lost none can be "
         "written: " +
         good + "\n";
}

void TrainSession::stop_signals_arm() const {
  stop_signals_install(stop_note(opt_.resume.empty() ? -1 : step_).c_str());
}

// The training loop: a step, its record (with the validation loss and task scores when due), then a stop signal,
// a checkpoint or a re-plan when due.
TrainResult TrainSession::run() {
  TrainResult result;
  stop_signals_arm();
  const long first = step_ + 1;
  long last = opt_.stop_after > 0 ? std::min(opt_.steps, step_ + opt_.stop_after) : opt_.steps;
  for (long step = first; step <= last; ++step) {
    debug_exit_if_asked(step);
    if (const std::string note = cpu_threads_.adapt(); !note.empty()) log_->note(note);
    const StepMetrics m = train_step_measured(step, lr_schedule(step, opt_.lr, opt_.min_lr, opt_.warmup, opt_.steps));
    result.losses.push_back(float(m.loss));
    result.grad_norms.push_back(float(m.grad_norm));
    nlohmann::json rec = metrics_step_record(m);
    if (validation_due(step)) rec["val_loss"] = result.final_val_loss = validation_logged(step);
    if (eval_tasks_due(step)) rec["eval_tasks"] = eval_tasks_score(step);
    memory_record(rec);
    log_->step(step, rec);
    step_ = step;
    if (step < last && (result.stop_signal = stop_agreed()) != 0) last = step;  // the final checkpoint, then out
    if (opt_.ckpt_every > 0 && step % opt_.ckpt_every == 0 && step != last) checkpoint(step);
    if (opt_.mem_budget > 0 && step == first + opt_.replan_after - 1) replan();
  }
  run_finish(result, first, last);
  return result;
}

// --debug-exit-at-step: the tests' way to lose a rank mid-run.
void TrainSession::debug_exit_if_asked(long step) const {
  if (step != opt_.debug_exit_step || grid_.replica != opt_.debug_exit_rank) return;
  std::fprintf(stderr, "agoq: debug: rank %d exits with code 3 at step %ld (--debug-exit-at-step)\n", grid_.replica,
               step);
  std::fflush(stderr);
  _exit(3);
}

// One step with its clocks: the wall time, and with --profile each op class's time (model/backend_timed.h).
StepMetrics TrainSession::train_step_measured(long step, float lr) {
  const auto t0 = std::chrono::steady_clock::now();
  if (tensor_group_) tensor_group_->seconds_take();  // from here: this step's
  if (timed_) timed_->take();
  const StepResult r = train_step(step, lr);
  StepMetrics m;
  m.step = step, m.lr = lr, m.loss = r.loss, m.grad_norm = r.grad_norm;
  if (tensor_group_) m.tp_comm_s = tensor_group_->seconds_take();
  if (timed_) m.ops = timed_->take();
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  m.tokens = tokens_per_step();
  m.compute = enum_name(kGemmPrecisionNames, compute_.gemm);
  if (grid_.D > 1) m.comm_wait_s = r.wait_s;
  seconds_total_ += m.seconds;
  wait_total_ += r.wait_s;
  if (m.ops)
    for (int c = 0; c < kOpClassCount; ++c) op_seconds_.s[c] += m.ops->s[c];
  return m;
}

bool TrainSession::validation_due(long step) const {
  return (opt_.eval_every > 0 && step % opt_.eval_every == 0) || step == opt_.steps;
}

float TrainSession::validation_logged(long step) {
  const float val = evaluate();
  char line[96];
  std::snprintf(line, sizeof line, "step %ld: val loss %.4f", step, val);
  log_->note(line);
  return val;
}

// The step's memory: each tracker's bytes by category and, beside the host's peaks, what the memory model says they
// are on this rank (one policy for the whole run: not after a replan), with the token files the run holds
// (workspace, tag "data": input, not modelled).
void TrainSession::memory_record(nlohmann::json& rec) const {
  rec["memory"] = memory_json();
  if (gpu_) rec["device_memory"] = memory_json(MemDevice::cuda);
  if (gpu_ || opt_.mem_budget != 0) return;
  PlanMemory model = plan_memory_cpu_trainer(cfg_, ActPolicy::parse(opt_.act_policy, cfg_.n_layers), plan_options());
  model[MemCategory::workspace] += MemoryTracker::global().tag_peak("data");
  rec["memory"]["model"] = mem_bytes_json(model.bytes);
}

// After the last step: the peaks, the final checkpoint, the report.
void TrainSession::run_finish(TrainResult& result, long first, long last) {
  result.last_step = last;
  result.replan_log = replan_log_;
  const MemoryTracker& tracker = MemoryTracker::of(gpu_ ? MemDevice::cuda : MemDevice::host);
  result.peak = tracker.peak_per_category();
  result.peak_total = tracker.peak_total();
  checkpoint(last);
  log_->finish();
  result.tokens_per_s = tokens_per_step() * double(last - first + 1) / seconds_total_;
  report(result, first);
  if (result.stop_signal && lead_) {
    const std::string ckpt = (fs::path(opt_.out_dir) / "ckpt").string();
    std::fprintf(stderr, "agoq: stopped by %s after step %ld of %ld; checkpoint %s (continue with --resume %s)\n",
                 stop_signal_name(result.stop_signal), last, opt_.steps, ckpt.c_str(), ckpt.c_str());
  }
}

void TrainSession::batches_allocate() {
  loader_ = std::make_unique<DataLoader>(train_set_, T_, opt_.seed);
  val_loader_ = std::make_unique<DataLoader>(val_set_, T_, opt_.seed);
  const size_t rows = size_t(B_) * T_;
  inputs_.resize(rows * m_);
  targets_.resize(rows * m_);
  skipped_.resize(3 * rows);
  if (train_set_.has_flags()) docs_.resize(rows * m_);
}

// The loader draws all D * m micro-batches of the step, in the same order on every rank; this replica keeps its m.
// With loss masks, every rank counts the targets of all of them: the step's loss is a mean over that count.
void TrainSession::batches_next() {
  const size_t rows = size_t(B_) * T_;
  int32_t *skip_in = skipped_.data(), *skip_tgt = skipped_.data() + rows, *skip_docs = skipped_.data() + 2 * rows;
  const bool masked = !docs_.empty();
  step_tokens_ = 0;
  for (int g = 0; g < grid_.D * m_; ++g) {
    const bool mine = g / m_ == grid_.replica;
    const size_t at = size_t(g % m_) * rows;
    int32_t* tgt = mine ? targets_.data() + at : skip_tgt;
    loader_->next_batch(B_, mine ? inputs_.data() + at : skip_in, tgt,
                        masked ? (mine ? docs_.data() + at : skip_docs) : nullptr);
    if (masked) step_tokens_ += double(std::count_if(tgt, tgt + rows, [](int32_t t) { return t >= 0; }));
  }
}

// One optimizer step in its five phases (optim/step.h; docs/agoq.md, "How a step flows").
StepResult TrainSession::train_step(long step, float lr) {
  batches_next();                                                  // the step's micro-batches, from the loader
  const std::vector<MicroBatchRun> runs = micro_batch_runs(step);  // 1. their seeds, scale and documents
  const double loss_sum = forward_backward(runs);                  // 2. gradients into the store, reductions begun
  const double wait_s = engine_->grads_reduce();                   // 3. summed over the replicas
  const StepNorm norm = engine_->norm_and_clip(loss_sum);          // 4. loss and norm over the grid, clipping
  engine_->update(lr, norm.clip_scale);                            // 5. AdamW
  model_->backend().weights_changed();  // the update wrote the weights: bf16 GEMMs copy them again
  return {norm.loss, norm.grad_norm, wait_s};
}

// Phase 1. A global batch of prompts only (no target counts) trains on nothing: loss and gradients 0.
std::vector<MicroBatchRun> TrainSession::micro_batch_runs(long step) {
  const bool masked = !docs_.empty();
  std::vector<MicroBatchRun> runs = engine_->step_begin(step, m_, masked ? std::max(step_tokens_, 1.0) : 0);
  if (masked)
    for (int j = 0; j < m_; ++j) runs[j].doc_start = docs_.data() + size_t(j) * B_ * T_;
  return runs;
}

// Phase 2: through the pipeline's schedule on a stage, else micro-batch after micro-batch on the whole model.
double TrainSession::forward_backward(const std::vector<MicroBatchRun>& runs) {
  if (pipeline_) return pipeline_->run(inputs_.data(), targets_.data(), B_, T_, runs, cpu_step_);
  return train_forward_backward(*engine_, *model_, inputs_.data(), targets_.data(), B_, T_, runs);
}

// On the first replica (replicas are identical), through the pipeline when there is one; broadcast to the others.
// With loss masks, the mean over every counted target of the n batches (a sum of per-batch sums over that count).
float TrainSession::evaluate() {
  const int n = val_loader_->val_batch_count(B_, opt_.eval_batches);
  const size_t rows = size_t(B_) * T_;
  const bool masked = val_set_.has_flags();
  std::vector<int32_t> in(rows), tgt(rows), docs(masked ? rows : 0);
  auto batch = [&](int i, int32_t* inputs, int32_t* targets, int32_t* doc_start) {
    val_loader_->val_batch(B_, opt_.eval_batches, i, inputs, targets, doc_start);
  };
  double tokens = 0;
  for (int i = 0; masked && i < n; ++i) {
    batch(i, in.data(), tgt.data(), docs.data());
    tokens += double(std::count_if(tgt.begin(), tgt.end(), [](int32_t t) { return t >= 0; }));
  }
  MicroBatchRun run;
  run.loss_tokens = masked ? std::max(tokens, 1.0) : 0;
  run.doc_start = masked ? docs.data() : nullptr;
  double sum = 0;
  if (grid_.replica == 0) {
    if (pipeline_) {
      sum = pipeline_->forward_loss_sum(batch, n, B_, T_, run.loss_tokens, masked);
    } else {
      for (int i = 0; i < n; ++i) {
        batch(i, in.data(), tgt.data(), masked ? docs.data() : nullptr);
        sum += model_->forward_loss(in.data(), tgt.data(), B_, T_, run);
      }
    }
  }
  float val = float(masked ? sum : sum / n);
  if (grid_.D > 1) grid_.dp->broadcast(&val, sizeof val, 0);
  return val;
}

void TrainSession::replan() {
  const ReplanResult r = replan_activation_bits(*model_, grid_, stages_, m_, size_t(B_) * T_, opt_.mem_budget);
  if (!r.error.empty()) comm_agreed(world_, [&] { fail(r.error); });  // the same on every rank: one message
  replan_log_ = r.log;
  log_->note(r.log);
}

}  // namespace agoq
