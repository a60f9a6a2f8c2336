#include "core/hash.h"

#include <gtest/gtest.h>

#include <string_view>

namespace agoq {

uint64_t hash_text(std::string_view s, uint64_t h = kHashFnv1a64Basis) { return hash_fnv1a64(s.data(), s.size(), h); }

TEST(Hash, Fnv1a64KnownAnswers) {
  EXPECT_EQ(hash_text(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(hash_text("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(hash_text("foobar"), 0x85944171f73967e8ull);
  EXPECT_EQ(hash_text("bar", hash_text("foo")), hash_text("foobar"));  // in pieces, as a stream is hashed
}

}  // namespace agoq
