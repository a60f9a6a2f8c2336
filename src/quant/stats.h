// Range statistics of a tensor as the group quantizer sees it, for bit allocation (plan/bit_alloc.h): a b-bit
// quantizer spreads 2^b levels over each group's range R, so its mean squared error is proportional to R^2 / (2^b-1)^2.
#pragma once
#include <cstddef>

namespace agoq {

// Sum over groups of R^2 x (values in the group), for rows x cols row-major values in groups of `group` along a row
// (the last group of a row may be shorter). R = 2 max|x| (symmetric) or max - min (asymmetric).
double quant_range_energy(const float* x, size_t rows, size_t cols, int group, bool symmetric);

}  // namespace agoq
