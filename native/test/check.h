// The check macros shared by the native C++ tests (the core's, the CUDA layer's and the
// transport plugins'): a failed check prints where and what, and counts; main() returns
// non-zero when any failed. Header-only: a test needs only this directory on its include path.
//   CHECK(cond)       cond holds
//   CHECK_EQ(a, b)    a == b (integers of different signedness by value); on failure both
//                     values are printed (numbers, enums, bools, strings and pointers; other
//                     types as "?"). Each side is evaluated once.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>
#include <type_traits>

inline int failures = 0;

/** A named group of checks, for run_groups. */
struct CheckGroup {
  const char* name;
  void (*fn)();
};

/**
 * Runs each group, printing "ok  " or "FAIL" with `prefix` and its name; returns main()'s
 * exit status (1 when any check failed, with the count on stderr).
 */
template <size_t N>
int run_groups(const CheckGroup (&groups)[N], const char* prefix = "") {
  for (const CheckGroup& g : groups) {
    const int before = failures;
    g.fn();
    std::printf("%s %s%s\n", failures == before ? "ok  " : "FAIL", prefix, g.name);
  }
  if (failures) std::fprintf(stderr, "%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}

#define CHECK(cond)                                                                 \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                                   \
    }                                                                               \
  } while (0)

namespace te_check {

template <typename T>
constexpr bool is_char_v =
    std::is_same_v<T, char> || std::is_same_v<T, signed char> || std::is_same_v<T, unsigned char>;

/** a == b; integers of different signedness compare by value (-1 is not SIZE_MAX), as C++20's std::cmp_equal. */
template <typename A, typename B>
bool equal(const A& a, const B& b) {
  if constexpr (std::is_integral_v<A> && std::is_integral_v<B> && !std::is_same_v<A, bool> &&
                !std::is_same_v<B, bool> && std::is_signed_v<A> != std::is_signed_v<B>) {
    if constexpr (std::is_signed_v<A>)
      return a >= 0 && static_cast<std::make_unsigned_t<A>>(a) == b;
    else
      return b >= 0 && a == static_cast<std::make_unsigned_t<B>>(b);
  } else {
    return a == b;
  }
}

/** A value of a failed CHECK_EQ as text. */
template <typename T>
std::string show(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_enum_v<T>) {
    return std::to_string(static_cast<std::underlying_type_t<T>>(v));
  } else if constexpr (is_char_v<T>) {
    return std::to_string(static_cast<int>(v));
  } else if constexpr (std::is_arithmetic_v<T>) {
    return std::to_string(v);
  } else if constexpr (std::is_null_pointer_v<T>) {
    return "nullptr";
  } else if constexpr (std::is_pointer_v<T> && is_char_v<std::remove_cv_t<std::remove_pointer_t<T>>>) {
    return v ? "\"" + std::string(reinterpret_cast<const char*>(v)) + "\"" : "nullptr";
  } else if constexpr (std::is_pointer_v<T>) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%p", (const void*)v);
    return buf;
  } else if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    return "\"" + std::string(std::string_view(v)) + "\"";
  } else {
    return "?";
  }
}

}  // namespace te_check

#define CHECK_EQ(a, b)                                                                                  \
  do {                                                                                                  \
    const auto& check_a_ = (a);                                                                         \
    const auto& check_b_ = (b);                                                                         \
    if (!te_check::equal(check_a_, check_b_)) {                                                         \
      std::fprintf(stderr, "%s:%d: CHECK_EQ failed: %s == %s (%s vs %s)\n", __FILE__, __LINE__, #a, #b, \
                   te_check::show(check_a_).c_str(), te_check::show(check_b_).c_str());                 \
      ++failures;                                                                                       \
    }                                                                                                   \
  } while (0)
