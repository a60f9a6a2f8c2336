// The device activation store against the CPU's definition: for every policy the store allocates exactly
// act_store_bytes (and the device tracker sees exactly that), and a saved tile of every stored slot holds the bytes
// the CPU's quant_encode_rows makes for the same rows and key, and decodes to the CPU's values, bit for bit.
#include <gtest/gtest.h>

#include <vector>

#include "arch/act_policy.h"
#include "arch/stage.h"
#include "core/error.h"
#include "core/rng.h"
#include "cuda/act_store_cuda.h"
#include "quant/tensor.h"
#include "tests/common/bits_equal.h"
#include "tests/cuda/cuda_test_util.h"

namespace agoq {
namespace {

LlamaConfig small_model() {
  LlamaConfig c;
  c.dim = 128, c.n_layers = 3, c.n_heads = 4, c.n_kv_heads = 2, c.ffn_dim = 320, c.vocab_size = 64;
  c.max_seq_len = 16;
  return c;
}

TEST(CudaActStore, AllocatesExactlyTheCpuStoresBytes) {
  AGOQ_REQUIRE_GPU();
  const LlamaConfig cfg = small_model();
  const int rows = 32;
  for (const char* name : {"fp32", "baseline-bf16", "agoq", "uniform4"})
    for (auto [tp, sp] : {std::pair{1, false}, std::pair{2, false}, std::pair{2, true}}) {
      const ActPolicy p = ActPolicy::parse(name, cfg.n_layers);
      const ModelStage stage = model_stage_shard(cfg, model_stage_whole(cfg), tp, tp - 1, sp);
      MemoryTracker& dev = MemoryTracker::of(MemDevice::cuda);
      const size_t before = dev.current().bytes[int(MemCategory::activations)];
      CudaActStore store(cfg, rows, p, stage);
      const size_t attn = act_store_bytes(p, cfg, rows, true, tp, sp);
      const size_t other = act_store_bytes(p, cfg, rows, false, tp, sp);
      EXPECT_EQ(store.stored_bytes(true), attn) << name << " tp " << tp << " sp " << sp;
      EXPECT_EQ(store.stored_bytes(false), other) << name << " tp " << tp << " sp " << sp;
      EXPECT_EQ(dev.current().bytes[int(MemCategory::activations)] - before, attn + other) << name;
    }
}

TEST(CudaActStore, SavedTilesAreTheCpuBytesAndDecodeAlike) {
  AGOQ_REQUIRE_GPU();
  const LlamaConfig cfg = small_model();
  const int rows = 32;
  const size_t r0 = 5, n = 9;  // a tile inside the tensor, not starting at row 0
  const ActPolicy p = ActPolicy::parse("agoq", cfg.n_layers);
  CudaActStore store(cfg, rows, p, model_stage_whole(cfg));
  store.set_seed(77);
  for (int layer = 0; layer < cfg.n_layers; ++layer)
    for (int si = 0; si < kActSlotCount; ++si) {
      const ActSlot s = ActSlot(si);
      if (!store.stored(layer, s) || store.is_fp32(layer, s)) continue;
      const size_t cols = size_t(store.cols(s));
      std::vector<float> tile(n * cols);
      Rng rng(uint64_t(layer * 100 + si));
      for (float& x : tile) x = rng.normal() * 2.f;
      DeviceBuffer<float> src(tile.size(), MemCategory::workspace), out(tile.size(), MemCategory::workspace);
      src.upload(tile.data(), tile.size());
      store.save_rows(layer, s, r0, n, src.data());

      QuantizedTensor want(store.format(layer, s), size_t(rows), cols, MemCategory::workspace);
      quant_encode_rows(want.format(), tile.data(), r0, n, cols, want.view(), store.slot_seed(layer, s));
      const DeviceQuantTensor& got = store.tensor(layer, s);
      ASSERT_EQ(got.bytes(), want.bytes());
      std::vector<uint8_t> bytes(got.bytes());
      got.data().download(bytes.data(), bytes.size());
      ASSERT_TRUE(bits_equal(bytes.data(), want.view().codes, bytes.size()))
          << "layer " << layer << " slot " << act_slot_name(s);

      const float* dec = store.load_rows(layer, s, r0, n, out.data());
      ASSERT_EQ(dec, out.data());
      std::vector<float> got_values(tile.size()), want_values(tile.size());
      out.download(got_values.data(), got_values.size());
      quant_decode_rows(want, r0, n, want_values.data());
      ASSERT_TRUE(bits_equal(got_values.data(), want_values.data(), tile.size() * sizeof(float)))
          << "layer " << layer << " slot " << act_slot_name(s);
    }
}

TEST(CudaActStore, Fp32SlotsAreReadInPlace) {
  AGOQ_REQUIRE_GPU();
  const LlamaConfig cfg = small_model();
  CudaActStore store(cfg, 8, ActPolicy::parse("fp32", cfg.n_layers), model_stage_whole(cfg));
  float* q = store.fp32_data(1, ActSlot::q);
  EXPECT_EQ(store.load_rows(1, ActSlot::q, 2, 3, nullptr), q + 2 * size_t(store.cols(ActSlot::q)));
  EXPECT_THROW(store.save_rows(1, ActSlot::q, 6, 3, q), Error);  // rows beyond the capacity
}

}  // namespace
}  // namespace agoq
