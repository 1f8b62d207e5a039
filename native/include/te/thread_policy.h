// Scheduling policy of a transport's own threads (I/O loops, copy threads).
//
// Under SCHED_BATCH a thread that is woken does not preempt the thread running on its CPU
// (the scheduler treats it as CPU-bound work and lets the tick decide). The JS thread wakes
// these threads once per batch (a request sent, a loop woken); under the default policy the
// woken thread took the CPU from the JS thread at once and both switched again moments later.
// With no CPU to spare that pair of switches is a large share of a small batch's cost; with
// idle CPUs the woken thread runs elsewhere and nothing changes. Setting SCHED_BATCH needs no
// privilege; the thread keeps its nice value and its fair share of CPU time.
#pragma once

#include <pthread.h>
#include <sched.h>

#include <cstring>
#include <string>
#include <thread>

namespace te {

/** Puts thread `t` under SCHED_BATCH: "" or why the kernel refused (it then keeps its policy). */
inline std::string schedule_as_batch(std::thread& t) {
  sched_param p{};
  p.sched_priority = 0;
  int e = pthread_setschedparam(t.native_handle(), SCHED_BATCH, &p);
  return e == 0 ? std::string() : std::string("SCHED_BATCH refused: ") + std::strerror(e);
}

}  // namespace te
