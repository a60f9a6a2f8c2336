#include "cuda/act_store_cuda.h"

#include "core/error.h"

namespace agoq {

void CudaActStore::save_rows(int layer, ActSlot s, size_t r0, size_t rows, const float* src) {
  if (!stored(layer, s)) return;
  DeviceQuantTensor& t = slot_tensor(layer, s);
  AGOQ_CHECK(r0 + rows <= t.rows(), "slot ", act_slot_name(s), " of layer ", layer, ": rows [", r0, ", ", r0 + rows,
             ") beyond its ", t.rows());
  if (is_fp32(layer, s) && src == fp32_data(layer, s) + r0 * t.cols()) return;
  cuda_quant_encode_rows_async(t.format(), src, r0, rows, t.cols(), t.view(), slot_seed(layer, s), stream_);
}

const float* CudaActStore::load_rows(int layer, ActSlot s, size_t r0, size_t rows, float* buf) const {
  if (const float* in_place = fp32_rows(layer, s, r0)) return in_place;
  const DeviceQuantTensor& t = tensor(layer, s);
  cuda_quant_decode_rows(t.format(), t.view(), r0, rows, t.cols(), buf, stream_);
  return buf;
}

}  // namespace agoq
