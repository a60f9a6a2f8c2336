#include "model/act_store_cpu.h"

#include <cstring>

#include "core/error.h"
#include "quant/stats.h"

namespace agoq {

void CpuActStore::save_rows(int layer, ActSlot s, size_t r0, size_t rows, const float* src) {
  if (!stored(layer, s)) return;
  QuantizedTensor& t = slot_tensor(layer, s);
  if (calibrating_) {
    const QuantFormat& f = format(layer, s);
    const bool q = f.kind == QuantKind::int_group;
    sensitivity_[int(s)] +=
        quant_range_energy(src, rows, t.cols(), q ? f.group : 128, q ? f.symmetric : s != ActSlot::swiglu_out);
  }
  if (is_fp32(layer, s) && src == fp32_data(layer, s) + r0 * t.cols()) return;
  quant_encode_rows(t.format(), src, r0, rows, t.cols(), t.view(), slot_seed(layer, s));
}

const float* CpuActStore::load_rows(int layer, ActSlot s, size_t r0, size_t rows, float* buf) const {
  if (const float* in_place = fp32_rows(layer, s, r0)) return in_place;
  quant_decode_rows(tensor(layer, s), r0, rows, buf);
  return buf;
}

}  // namespace agoq
