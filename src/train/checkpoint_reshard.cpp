#include "train/checkpoint_reshard.h"

#include <algorithm>
#include <unordered_map>

#include "core/error.h"
#include "core/json_read.h"
#include "formats/safetensors.h"
#include "optim/moments_schema.h"

namespace agoq {

size_t named_tensor_bytes(const NamedTensor& t) {
  size_t n = t.raw ? safetensors_dtype_size(t.dtype) : sizeof(float);
  for (int64_t d : t.shape) n *= size_t(d);
  return n;
}

namespace {
// Shard r of T of a tensor split along `split` (model_tensor_slice; -1: the same tensor) to its place in the whole
// tensor (into_whole), or back.
void shard_copy(float* shard, float* whole, const std::vector<int64_t>& shape, int split, int T, int r,
                bool into_whole) {
  const TensorSlice t = model_tensor_slice(shape, split, T, r);
  for (size_t i = 0; i < t.rows; ++i) {
    float* w = whole + (t.row0 + i) * t.whole_cols + t.col0;
    float* s = shard + i * t.cols;
    if (into_whole) std::copy(s, s + t.cols, w);
    else std::copy(w, w + t.cols, s);
  }
}

}  // namespace

WholeTensors whole_tensors_of(const NamedTensors& shard, const ParamSet& params, int T, bool allocate) {
  WholeTensors out;
  out.T = T;
  if (T == 1) {
    out.views = shard;
    out.split_dims.assign(shard.size(), -1);
    return out;
  }
  std::unordered_map<std::string, int> split;
  for (const ParamTensor& t : params.named()) split[t.name] = t.split_dim;
  for (const NamedTensor& t : shard) {
    const auto it = split.find(moments_weight_of(t.name));
    AGOQ_CHECK(it != split.end(), "tensor ", t.name, " is not one of the model's (internal)");
    std::vector<int64_t> shape = t.shape;
    if (it->second >= 0) shape[it->second] *= T;
    out.split_dims.push_back(it->second);
    if (!allocate) continue;
    const NamedTensor w{t.name, shape, nullptr};
    out.buffers.emplace_back(named_tensor_bytes(w) / sizeof(float), MemCategory::workspace, "ckpt.gather");
    out.views.push_back({t.name, shape, out.buffers.back().data()});
  }
  return out;
}

void whole_tensors_slice(const WholeTensors& whole, const NamedTensors& shard, int tp_rank) {
  if (whole.T == 1) return;
  for (size_t i = 0; i < shard.size(); ++i)
    shard_copy(shard[i].data, whole.views[i].data, shard[i].shape, whole.split_dims[i], whole.T, tp_rank, false);
}

void whole_tensors_gather(WholeTensors& whole, const NamedTensors& shard, Communicator& tp) {
  constexpr int kTag = 22;
  if (tp.rank() != 0) {
    for (size_t i = 0; i < shard.size(); ++i)
      if (whole.split_dims[i] >= 0) tp.send(shard[i].data, named_tensor_bytes(shard[i]), 0, kTag);
    return;
  }
  size_t largest = 0;
  for (size_t i = 0; i < shard.size(); ++i) {
    shard_copy(shard[i].data, whole.views[i].data, shard[i].shape, whole.split_dims[i], whole.T, 0, true);
    largest = std::max(largest, named_tensor_bytes(shard[i]) / sizeof(float));
  }
  Buffer<float> received(largest, MemCategory::workspace, "ckpt.gather");
  for (int r = 1; r < tp.size(); ++r)
    for (size_t i = 0; i < shard.size(); ++i) {
      if (whole.split_dims[i] < 0) continue;  // replicated: TP rank 0's copy
      tp.recv(received.data(), named_tensor_bytes(shard[i]), r, kTag);
      shard_copy(received.data(), whole.views[i].data, shard[i].shape, whole.split_dims[i], whole.T, r, true);
    }
}

NamedTensors moments_of_shard(NamedTensors moments, int tp_rank) {
  for (NamedTensor& t : moments) t.name = moments_shard_prefix(tp_rank) + t.name;
  return moments;
}

int moments_tp_of(const nlohmann::json& trainer, const LlamaConfig& cfg) {
  if (!trainer.is_object() || !trainer.contains("tp")) return 1;
  const nlohmann::json& tp = trainer["tp"];
  AGOQ_CHECK(tp.is_number_integer() && tp.get<int64_t>() >= 1 && tp.get<int64_t>() <= 65536,
             "checkpoint's trainer.json: tp must be a whole number from 1 to 65536 (got ", json_excerpt(tp), ")");
  const int T = tp.get<int>();
  try {  // the shards its 8-bit moments were written as must exist for this model
    model_stage_shard(cfg, model_stage_whole(cfg), T, 0);
  } catch (const Error& e) {
    std::string why = e.what();  // the shard check speaks of a flag; here no flag was given
    if (why.rfind("--tp ", 0) == 0) why.erase(0, 2);
    fail("checkpoint's trainer.json says it was written with tensor parallelism ", T,
         ", which this model cannot have been split into (damaged?): ", why);
  }
  return T;
}

Q8FileMoments::Q8FileMoments(const LlamaConfig& cfg, ModelStage stage, const MomentsForm& f, int T) : form(f.q8) {
  stage.tp = 1, stage.tp_rank = 0;
  shards.reserve(size_t(T));
  for (int r = 0; r < T; ++r) {  // per shard: its codes over its layout, its scales unit after unit
    Shard& sh = shards.emplace_back();
    sh.stage = model_stage_shard(cfg, stage, T, r);
    sh.units = model_grad_units(cfg, sh.stage);
    size_t blocks = 0;
    for (const ParamSegment& u : sh.units)
      sh.scale_at.push_back(blocks), blocks += adam_q8_blocks(u.end - u.begin, form.block);
    const size_t n = sh.units.back().end;
    sh.m_codes = Buffer<int8_t>(n, MemCategory::workspace, "ckpt.moments");
    sh.v_codes = Buffer<uint8_t>(n, MemCategory::workspace, "ckpt.moments");
    sh.m_scales = Buffer<float>(blocks, MemCategory::workspace, "ckpt.moments");
    sh.v_scales = Buffer<float>(blocks, MemCategory::workspace, "ckpt.moments");
    MomentsPlace at;
    at.block = form.block;
    for (size_t u = 0; u < sh.units.size(); ++u) {
      at.m_codes.push_back(sh.m_codes.data() + sh.units[u].begin);
      at.v_codes.push_back(sh.v_codes.data() + sh.units[u].begin);
      at.m_scales.push_back(sh.m_scales.data() + sh.scale_at[u]);
      at.v_scales.push_back(sh.v_scales.data() + sh.scale_at[u]);
    }
    const std::string prefix = T > 1 ? moments_shard_prefix(r) : "";
    for (NamedTensor& t : moments_views(hf_tensors(cfg, sh.stage), sh.stage, sh.units, at, prefix))
      tensors.push_back(std::move(t));
  }
}

void Q8FileMoments::decode(const LlamaConfig& cfg, const NamedTensors& whole) {
  std::unordered_map<std::string, float*> into;
  for (const NamedTensor& t : whole) into[t.name] = t.data;
  const int T = int(shards.size());
  for (int r = 0; r < T; ++r) {  // one shard's fp32 moments at a time
    const Shard& sh = shards[r];
    const size_t n = sh.units.back().end;
    Buffer<float> m(n, MemCategory::workspace, "ckpt.moments"), v(n, MemCategory::workspace, "ckpt.moments");
    for (size_t u = 0; u < sh.units.size(); ++u) {
      const size_t a = sh.units[u].begin, b = sh.scale_at[u];
      adam_q8_decode(form, sh.m_codes.data() + a, sh.v_codes.data() + a, sh.m_scales.data() + b, sh.v_scales.data() + b,
                     sh.units[u].end - a, m.data() + a, v.data() + a);
    }
    MomentsPlace at;  // the decoded shard, fp32
    at.m = {m.data()}, at.v = {v.data()};
    const std::vector<HfTensor> tensors = hf_tensors(cfg, sh.stage);
    const NamedTensors decoded = moments_views(tensors, sh.stage, {{0, n}}, at);
    for (size_t i = 0; i < decoded.size(); ++i) {  // m and v of tensor i / 2
      const int split = model_tensor_split_dim(tensors[i / 2].role);
      if (split < 0 && r != 0) continue;  // replicated (the norms): TP rank 0's, as for the weights
      const auto it = into.find(decoded[i].name);
      AGOQ_CHECK(it != into.end(), "moment ", decoded[i].name, " is not one of the run's (internal)");
      shard_copy(decoded[i].data, it->second, decoded[i].shape, split, T, r, true);
    }
  }
}

}  // namespace agoq
