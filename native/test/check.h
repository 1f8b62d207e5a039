// The check macros of the native C++ tests built by native/CMakeLists.txt: a failed check
// prints where and what, and counts; main() returns non-zero when any failed.
#pragma once

#include <cstdio>

inline int failures = 0;
#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                                    \
    }                                                                                \
  } while (0)
#define CHECK_EQ(a, b) CHECK((a) == (b))
