// Predicted time of one training step of a LLaMA model under a TP x PP x DP layout, term by term, from named
// machine inputs (a calibration: device rates and links), beside the memory model (plan/memory_model.h).
// docs/plan.md ("Choosing a layout") states every assumption; tests/plan/test_time_model.cpp checks the terms
// against hand-computed values and scripts/validate-plan.sh against real `agoq train` runs.
//
// One micro-batch on one rank of stage s costs t_mb(s) = compute + elementwise + activation store + gradient
// store + TP collectives, or its asynchronous PP sends if they take longer. Under non-interleaved 1F1B the step's
// pipeline part is m x the slowest stage's t_mb of work and a bubble of (P - 1) x t_mb plus the first and last
// crossings (ranks time-sharing cores fill part of it). Then the data-parallel reduction (its part that the last
// backward does not hide), ZeRO-1's gather and the optimizer step.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "arch/act_policy.h"
#include "plan/memory_model.h"

namespace agoq {

// A rate measured at several sizes: (size, value) points, interpolated linearly in log-log between them and held
// constant beyond the ends. One point is a constant rate.
struct PlanRateCurve {
  std::vector<std::pair<double, double>> points;
  double at(double size) const;
};

// Throughputs of one rank's device while every rank of the host is busy (what a run sees).
struct PlanDeviceRates {
  PlanRateCurve gemm;           // FLOP/s by FLOPs per GEMM call (of 256 rows where measured)
  PlanRateCurve gemm_rows;      // a GEMM's rate by its rows, as a part of gemm's (empty: 1, whatever the rows)
  PlanRateCurve attention;      // FLOP/s of causal flash attention, forward + backward, by sequence length
  double elementwise_bw = 0;    // bytes/s of the memory-bound ops (norms, rope, SwiGLU, residual adds, softmax)
  double act_quant_bw = 0;      // fp32 bytes/s of one 4-bit quantize (forward) + dequantize (backward) of a saved slot
  double act_bf16_bw = 0;       // the same for a slot kept in bf16
  double grad_fold_bw = 0;      // fp32 bytes/s of the q8 gradient store's dequantize-add-requantize
  double adam_params_s = 0;     // AdamW parameters/s, fp32 moments
  double adam_q8_params_s = 0;  // AdamW parameters/s, 8-bit moments
  // A real model's forward + backward against what the rates above predict for it (cache misses, loops between
  // the kernels): the GEMM, attention and elementwise terms are divided by it. 1 where the rates are end-to-end.
  double model_efficiency = 1.0;
};

// bytes_s: what each rank moves per second in a ring collective (sending and receiving at once); send_bytes_s: one
// transfer in one direction (a pipeline send). Equal on full-duplex links (NVLink, InfiniBand); a shaped TCP link
// between namespaces here gives a collective about half.
struct PlanLink {
  double bytes_s = 0, latency_s = 0, send_bytes_s = 0;
};

// Ring collectives over n ranks on one link: all-reduce 2(n-1)/n of the bytes and 2(n-1) latencies; all-gather and
// reduce-scatter (and all-to-all) half of each; a point-to-point send the bytes and one latency.
double plan_allreduce_s(const PlanLink& l, double bytes, int n);
double plan_allgather_s(const PlanLink& l, double bytes, int n);  // bytes: the whole (gathered) buffer
double plan_send_s(const PlanLink& l, double bytes);

// The trainer being modelled. Megatron on GPUs: GEMMs over whole micro-batches, bf16 activations on the wire (TP,
// PP) and bf16 weights gathered under ZeRO-1. agoq's CPU trainer: GEMMs tile by tile (llama_tile_rows), the head in
// chunks of 256 rows, fp32 on the wire and in the gather.
enum class PlanTrainer { megatron_gpu, agoq_cpu };
const char* plan_trainer_name(PlanTrainer t);
PlanTrainer plan_trainer_parse(const std::string& name);
double plan_trainer_wire_bytes(PlanTrainer t);  // bytes per activation value and per gathered weight

struct PlanCalibration {
  std::string source = "defaults";  // "defaults (H100-class)", a calibration file's path, ...
  PlanDeviceRates device;
  PlanLink intra, inter;  // inside a node, between nodes
  int ranks_per_node = 8;
  PlanTrainer trainer = PlanTrainer::megatron_gpu;
  // The DP reduction overlaps the last micro-batch's backward (separate streams on a GPU; 0 where collectives and
  // compute share the cores, as ranks oversubscribing a CPU do).
  double dp_overlap = 1.0;
  // Cores per rank while every rank runs: 1 for a device (or core) each; 0.5 for 4 ranks on 2 cores. Below 1 the
  // ranks time-share the cores and a rank waiting in the pipeline's bubble hands its core to the others.
  double core_share = 1.0;
  // The part of its core a rank waiting in MPI hands to the others (0: it spins, 1: it sleeps); with core_share < 1.
  double wait_yield = 1.0;
  // Tensor-parallel shards' work against the model's terms for it, relative to model_efficiency (1: as predicted;
  // below 1 where ranks time-sharing cores wait at each collective for a partner whose core serves another rank).
  double tp_efficiency = 1.0;
  int measured_ranks = 0;  // the rank count a calibration was measured at (0: not measured)
};

// What runs: the system's activation policy, gradient store, DP reduction and optimizer state.
struct PlanTimeOptions {
  PlanSystem system = PlanSystem::agoq;
  bool optim_q8 = false;
  size_t bucket_bytes = 25 << 20;  // fp32 bytes per gradient bucket (one latency each in the DP reduction)
};

struct PlanTimeTerm {
  std::string name;
  double seconds = 0;
};

struct PlanTime {
  std::vector<PlanTimeTerm> terms;    // sums to step_s
  std::vector<double> micro_batch_s;  // t_mb of each stage
  int slowest_stage = 0;
  double step_s = 0, tokens_s = 0;
  double term(const std::string& name) const;  // 0 when absent
};

// FLOPs of one micro-batch of `rows` tokens (sequences of `seq`) through a stage on one TP rank, forward and
// backward: the GEMMs (forward 2·in·out per token, backward twice that) and causal attention (forward
// 2 products of seq²/2·hd per head and sequence, backward 2.5x the forward).
struct PlanStageFlops {
  double gemm = 0, attention = 0;
  struct Gemm {
    double flops = 0;  // of one call
    int calls = 0;     // per micro-batch
    double rows = 0;   // of one call
  };
  std::vector<Gemm> gemm_calls;
};
PlanStageFlops plan_stage_flops(const LlamaConfig& cfg, const PlanStage& st, int tp, int micro_batch, int seq,
                                const PlanCalibration& cal);

PlanTime plan_step_time(const LlamaConfig& cfg, const PlanParallel& par, const PlanWorkload& w,
                        const PlanTimeOptions& opt, const PlanCalibration& cal);
nlohmann::json plan_time_json(const PlanTime& t);
// "predicted step (agoq): 1.234 s, 53000 tokens/s; gemm+attention 0.9, ..." with the calibration's source.
std::string plan_time_text(const PlanTime& t, const std::string& system, const std::string& source);

}  // namespace agoq
