// Clocks every native layer reads: the monotonic clock for deadlines and timers, and the
// calling thread's CPU time (a polling thread tells a wait that did work from one that slept).
#pragma once

#include <time.h>

#include <cstdint>

namespace te {

/** Monotonic time in milliseconds (CLOCK_MONOTONIC, the clock std::chrono::steady_clock reads on Linux). */
inline int64_t now_ms() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000 + t.tv_nsec / 1000000;
}

/** Monotonic time in microseconds. */
inline int64_t now_us() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000 + t.tv_nsec / 1000;
}

/** CPU time the calling thread has used, in microseconds. */
inline int64_t thread_cpu_us() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000 + t.tv_nsec / 1000;
}

}  // namespace te
