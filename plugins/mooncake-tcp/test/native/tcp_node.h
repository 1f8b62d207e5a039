// The C++ tests' transport node: a mooncake-tcp transport core started on loopback, its
// events collected for the test thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport.h"

namespace tcp_test {

using tetcp::Event;
using tetcp::Options;
using tetcp::Transport;

/** One transport with its events collected for the test thread. */
struct Node {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Event> events;
  std::unique_ptr<Transport> t;

  explicit Node(Options o) {
    t = std::make_unique<Transport>(std::move(o), [this](Event e) {
      std::lock_guard<std::mutex> lock(mu);
      events.push_back(std::move(e));
      cv.notify_all();
    });
    std::string err;
    if (t->start(&err) != te::TE_OK) {
      std::fprintf(stderr, "start: %s\n", err.c_str());
      std::exit(2);
    }
  }
  ~Node() { t->close(); }

  /** Waits (bounded) for the event of `kind` with `id`; false on timeout. */
  bool wait(Event::Kind kind, uint64_t id, Event* out, int ms = 10000) {
    std::unique_lock<std::mutex> lock(mu);
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    for (;;) {
      for (auto it = events.begin(); it != events.end(); ++it) {
        if (it->kind == kind && (kind == Event::NOTIFY || it->id == id)) {
          if (out) *out = std::move(*it);
          events.erase(it);
          return true;
        }
      }
      if (cv.wait_until(lock, until) == std::cv_status::timeout) return false;
    }
  }
};

inline Options options(const std::string& name, uint64_t epoch, int lanes = 2, int threads = 2) {
  Options o;
  o.segment_name = name;
  o.epoch = epoch;
  o.lanes = lanes;
  o.io_threads = threads;
  o.cancel_grace_ms = 100;
  return o;
}

}  // namespace tcp_test
