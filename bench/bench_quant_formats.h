// The storage formats `bench quant` times, on the CPU (bench/bench_quant.cpp) and on the GPU
// (bench/cuda/bench_quant_cuda.cpp): the keep formats, then every int width both symmetric and not, rounded both ways.
#pragma once
#include <vector>

#include "quant/format.h"

namespace agoq {

inline std::vector<QuantFormat> bench_quant_formats() {
  std::vector<QuantFormat> formats = {quant_format_fp32(), quant_format_bf16()};
  for (int bits : {2, 3, 4, 8})
    for (bool sym : {true, false})
      for (auto r : {QuantRounding::nearest, QuantRounding::stochastic})
        formats.push_back(quant_format_int(bits, 128, sym, r));
  return formats;
}

}  // namespace agoq
