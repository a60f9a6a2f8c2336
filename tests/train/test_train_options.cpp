// The table of training options (train/train_options.h): every row's default is TrainOptions', every bounded row is
// refused past its bound by a message naming its flag, the rows' flags are unique, and the description ranks compare
// changes with every option that is not local.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "tests/common/expect_error.h"
#include "train/train_options.h"

namespace agoq {
namespace {

// A valid TrainOptions: the defaults and the one required path.
TrainOptions valid() {
  TrainOptions o;
  o.data_dir = "data";
  return o;
}

// Calls f(flag) for each bound of each bounded row, with that row's field of o put just past the bound (the bound
// itself when it is open, else the next whole value beyond it) and restored after.
template <class F>
void for_each_bound_passed(TrainOptions& o, F&& f) {
  train_option_rows(o, [&](auto& field, const char* flag, const auto&, const char*, const auto& spec) {
    using T = std::decay_t<decltype(field)>;
    if constexpr (std::is_same_v<std::decay_t<decltype(spec)>, OptionSpec> && std::is_arithmetic_v<T> &&
                  !std::is_same_v<T, bool>) {
      const T saved = field;
      if (spec.min != -HUGE_VAL) {
        field = spec.min_open ? T(spec.min) : T(spec.min - 1);
        f(flag);
      }
      if (spec.max != HUGE_VAL) {
        field = spec.max_open ? T(spec.max) : T(spec.max + 1);
        f(flag);
      }
      field = saved;
    }
  });
}

TEST(TrainOptions, DefaultsAreAGoQsAndValid) {
  const TrainOptions o = valid();
  EXPECT_EQ(o.act_policy, "agoq");
  EXPECT_EQ(o.grad_store, GradStoreKind::q8);
  EXPECT_EQ(o.allreduce, GradReduce::q8);
  EXPECT_EQ(o.compute, ComputeMode::automatic);
  EXPECT_EQ(o.adam.beta2, AdamWConfig{}.beta2);  // AdamW's defaults are optim's own
  EXPECT_NO_THROW(train_options_validate(o));
  const TrainOptions ref = train_options_reference();
  EXPECT_EQ(ref.act_policy, "fp32");
  EXPECT_EQ(ref.grad_store, GradStoreKind::fp32);
  EXPECT_EQ(ref.allreduce, GradReduce::fp32);
  EXPECT_EQ(ref.adam.state, OptimState::fp32);
  EXPECT_EQ(ref.compute, ComputeMode::fp32);
}

TEST(TrainOptions, EveryBoundIsCheckedByItsFlag) {
  TrainOptions o = valid();
  int bounds = 0;
  for_each_bound_passed(o, [&](const char* flag) {
    expect_error([&] { train_options_validate(o); }, {std::string(flag) + " must be"});
    ++bounds;
  });
  EXPECT_GE(bounds, 20) << "the table's bounds";
  EXPECT_NO_THROW(train_options_validate(o)) << "each field is restored";
}

TEST(TrainOptions, NotANumberIsRefused) {
  TrainOptions o = valid();
  o.lr = NAN;
  expect_error([&] { train_options_validate(o); }, {"--lr must be a positive number (got nan)"});
  o = valid();
  o.zero = 2;
  expect_error([&] { train_options_validate(o); }, {"--zero must be 0 or 1 (got 2)"});
  o = valid();
  o.data_dir.clear();
  expect_error([&] { train_options_validate(o); }, {"--data is required"});
}

TEST(TrainOptions, FlagsAreUniqueAndTheDescriptionSeesEverySharedOption) {
  std::set<std::string> flags;
  TrainOptions o = valid();
  const std::string base = train_run_description(o, o.model, "");
  train_option_rows(o, [&](auto& field, const char* flag, const auto&, const char*, const auto& spec) {
    EXPECT_TRUE(flags.insert(flag).second) << flag << " is in the table twice";
    using T = std::decay_t<decltype(field)>;
    if constexpr (std::is_same_v<std::decay_t<decltype(spec)>, OptionSpec> && std::is_arithmetic_v<T> &&
                  !std::is_same_v<T, bool>) {
      if (spec.local) return;
      const T saved = field;
      field = T(field + 1);
      EXPECT_NE(train_run_description(o, o.model, ""), base) << flag << " is not in the ranks' description";
      field = saved;
    }
  });
}

}  // namespace
}  // namespace agoq
