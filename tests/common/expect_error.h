// Test helper shared by every test binary (tests/common holds headers only, so it builds no binary of its own).
#pragma once
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "core/error.h"

namespace agoq {

// Runs f, expecting an agoq::Error whose message contains every one of `parts`.
template <class F>
void expect_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "expected agoq::Error";
  } catch (const Error& e) {
    for (const std::string& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

}  // namespace agoq
