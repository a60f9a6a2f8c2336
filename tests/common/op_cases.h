// One table of cases for the ops of model/op_table.h, run through any ModelBackend against the float64 references
// (op_reference.h) and finite differences (op_check.h), as ggml's test-backend-ops does: inputs are made on the host,
// uploaded, the op runs on the backend, outputs come back and are compared. Outputs that accumulate start from
// random values and those that overwrite from garbage, so each op's overwrite / accumulate rule (model/ops.h) is
// checked too. tests/model runs the table on the CPU backend, the timed one and the device-like one, each case again
// on 1 and 2 OpenMP threads for the same bits; tests/cuda_train on the CUDA backend (skipped without a GPU), holding
// the cases marked cpu_bits to the CPU's bits. Every op of the table has a case: OpTable.EveryOpHasACase says so.
// Adding a case: a line below, or a shape in one of the family's lists (op_cases_dense.h, _head.h, _attention.h).
#pragma once
#include <vector>

#include "tests/common/op_case.h"
#include "tests/common/op_cases_attention.h"
#include "tests/common/op_cases_dense.h"
#include "tests/common/op_cases_head.h"

namespace agoq {

inline std::vector<OpCase> make_op_cases() {
  using namespace op_cases_detail;
  std::vector<OpCase> cases;
  // The product shapes: odd, 1 x 1 x 1, and larger than a block of the BLAS and of oneDNN's bf16 kernels.
  for (const auto& [N, I, O] : {std::tuple{6, 7, 5}, std::tuple{7, 13, 5}, std::tuple{1, 1, 1}, std::tuple{33, 64, 24},
                                std::tuple{67, 96, 80}, std::tuple{130, 256, 688}})
    add_matmul_cases(cases, N, I, O);
  // RMSNorm rows: odd, one element, a row past a CUDA block (4099), and enough rows for every thread (512).
  for (const auto& [N, C] : {std::pair{6, 12}, std::pair{7, 13}, std::pair{1, 1}, std::pair{67, 256},
                             std::pair{3, 4099}, std::pair{512, 256}})
    add_rmsnorm_cases(cases, N, C);
  add_rope_case(cases, 2, 3, 2, 6, 10000.0, true);
  add_rope_case(cases, 2, 5, 4, 6, 10000.0, true);
  add_rope_case(cases, 2, 5, 4, 6, 500000.0, true);
  add_rope_case(cases, 1, 67, 2, 64, 10000.0, true);
  add_rope_case(cases, 1, 67, 2, 64, 500000.0, true);
  add_rope_case(cases, 2, 256, 8, 32, 10000.0, false);
  add_rope_case(cases, 2, 256, 8, 128, 500000.0, false);
  for (const size_t n : {size_t(13), size_t(40), size_t(100003), size_t(512) * 256}) add_swiglu_cases(cases, n);
  cases.push_back(mlp_forward_only_case(37, 48, 80));
  for (const size_t n : {size_t(5), size_t(40), (size_t(1) << 17) + 3}) add_residual_case(cases, n);
  add_embedding_cases(cases, 7, 13, 5, 0, 5);
  add_embedding_cases(cases, 6, 12, 9, 2, 5);  // a shard of rows [2, 7): tokens outside it give nothing
  add_embedding_cases(cases, 300, 200, 11, 0, 11);
  add_embedding_cases(cases, 300, 200, 11, 4, 4);
  add_embedding_cases(cases, 512, 256, 50, 0, 50);
  add_crossentropy_cases(cases);
  add_attention_cases(cases);
  return cases;
}

// The table, made once (its inputs are random draws of fixed seeds).
inline const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases = make_op_cases();
  return cases;
}

}  // namespace agoq
