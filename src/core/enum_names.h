// An enum's names as flags and files spell them, listed once per enum (a table of {value, name}): a flag's value
// parsed into the enum, and a value named for a report or a checkpoint.
#pragma once
#include <cstddef>
#include <string>

#include "core/error.h"

namespace agoq {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

// The value named s; throws Error "<flag> must be a, b or c (got 's')".
template <class E, size_t N>
E enum_parse(const EnumName<E> (&names)[N], const std::string& s, const char* flag) {
  std::string all;
  for (size_t i = 0; i < N; ++i) {
    if (s == names[i].name) return names[i].value;
    all += std::string(i == 0 ? "" : i + 1 == N ? " or " : ", ") + names[i].name;
  }
  fail(flag, " must be ", all, " (got '", s, "')");
}

template <class E, size_t N>
const char* enum_name(const EnumName<E> (&names)[N], E value) {
  for (const EnumName<E>& n : names)
    if (n.value == value) return n.name;
  return "?";
}

}  // namespace agoq
