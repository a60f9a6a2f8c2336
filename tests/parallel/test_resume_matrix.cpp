// Resume is bit-identical on every grid with every precision of the state it carries: {fp32, 8-bit gradients} x
// {fp32, 8-bit AdamW moments} x the grids of the job's size (1 process; DP 2, TP 2, PP 2, TP 2 + SP on 2 ranks;
// TP 2 x PP 2, TP 2 x DP 2, TP 2 + SP x PP 2 on 4). Under TP the norms' copies must never drift apart between
// shards (no quantization block mixes a norm with a shard's slice): a checkpoint keeps TP rank 0's, so any drift
// shows as a resumed loss that differs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "parallel_test_util.h"
#include "train/trainer.h"

namespace agoq {
namespace {

namespace fs = std::filesystem;

struct Grid {
  const char* name;
  int ranks, tp, pp;
  bool sp;
};

constexpr Grid kGrids[] = {{"one process", 1, 1, 1, false}, {"DP 2", 2, 1, 1, false},
                           {"TP 2", 2, 2, 1, false},        {"PP 2", 2, 1, 2, false},
                           {"TP 2 + SP", 2, 2, 1, true},    {"TP 2 x PP 2", 4, 2, 2, false},
                           {"TP 2 x DP 2", 4, 2, 1, false}, {"TP 2 + SP x PP 2", 4, 2, 2, true}};

TEST(ResumeMatrix, EveryGridAndPrecisionResumesBitIdentically) {
  const int W = world().size();
  int ran = 0;
  for (const Grid& g : kGrids) {
    if (g.ranks != W) continue;
    for (const bool grad_q8 : {false, true})
      for (const OptimState moments : {OptimState::fp32, OptimState::q8}) {
        const std::string what = std::string(g.name) + (grad_q8 ? ", 8-bit gradients" : ", fp32 gradients") +
                                 (moments == OptimState::q8 ? ", 8-bit moments" : ", fp32 moments");
        SCOPED_TRACE(what);
        const fs::path data = shared_data("matrix" + std::to_string(ran), 48);
        TrainOptions o = tiny(data, "straight", 2);
        o.tp = g.tp, o.pp = g.pp, o.sp = g.sp;
        o.grad_store = grad_q8 ? GradStoreKind::q8 : GradStoreKind::fp32;
        o.allreduce = grad_q8 ? GradReduce::q8 : GradReduce::fp32;
        o.adam.state = moments;
        expect_resume_bit_identical(o, data);
        shared_cleanup(data);
        ++ran;
      }
  }
  if (ran == 0) GTEST_SKIP() << "no grid of " << W << " ranks in the matrix";
}

}  // namespace
}  // namespace agoq
