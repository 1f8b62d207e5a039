// One epoll event loop on its own thread. Connections (server side and client lanes) are
// owned by exactly one loop and only touched from its thread; other threads post tasks.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "te/clock.h"
#include "te/thread_policy.h"

namespace tetcp {

using te::now_ms;
using te::now_us;

class IoHandler {
 public:
  virtual ~IoHandler() = default;
  /** Readiness on the handler's fd (EPOLL* bits). */
  virtual void on_event(uint32_t events) = 0;
  /** Called every few milliseconds for deadlines. */
  virtual void on_tick(int64_t now) {}
  /** The loop is stopping: close the fd and fail what is pending. May delete itself. */
  virtual void on_shutdown() = 0;
  bool closed = false;
};

class Loop {
 public:
  /**
   * `spin_us`: busy-poll window after events (0: always sleep in epoll_wait). `tick_ms`: how
   * often handlers' on_tick runs, which is also the longest an idle loop sleeps.
   */
  explicit Loop(int index, int64_t spin_us = 0, int tick_ms = 10);
  ~Loop();
  /** False when the process had no descriptor for the loop's epoll or eventfd: do not start it. */
  bool ready() const { return epfd_ >= 0 && evfd_ >= 0; }
  void start();
  /** Puts the loop's thread under SCHED_BATCH (te/thread_policy.h): "" or why not. */
  std::string schedule_as_batch() { return te::schedule_as_batch(thread_); }
  /** Runs the remaining tasks, calls on_shutdown() on every handler and joins the thread. */
  void stop();
  /**
   * Any thread: run `task` on the loop thread. The loop is woken (an eventfd write, which on
   * a busy host costs the caller a scheduler round trip) only when it sleeps in epoll_wait;
   * a loop that is running picks the task up before it sleeps again.
   */
  void post(std::function<void()> task);
  /** Eventfd writes post() made so far (a post to a running loop makes none). */
  uint64_t wakeups() const { return wakeups_.load(std::memory_order_relaxed); }
  bool on_loop_thread() const { return std::this_thread::get_id() == thread_.get_id(); }
  int index() const { return index_; }

  // Loop thread only.
  bool add(int fd, uint32_t events, IoHandler* h);
  void modify(int fd, uint32_t events, IoHandler* h);
  void remove(int fd, IoHandler* h);
  /** Deletes `h` at the end of the current iteration (after remove()). */
  void retire(IoHandler* h, bool destroy);
  void track(IoHandler* h) { handlers_.insert(h); }
  bool stopping() const { return stopping_.load(); }

 private:
  void run();
  void run_tasks();
  int index_;
  int64_t spin_us_;
  int tick_ms_;
  int epfd_ = -1;
  int evfd_ = -1;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::vector<std::function<void()>> tasks_;
  // Together they rule out a lost wake-up: the loop sets sleeping_ and then reads
  // has_tasks_; post() sets has_tasks_ and then reads sleeping_ (both sequentially
  // consistent), so at least one of the two sees the other.
  std::atomic<bool> has_tasks_{false};
  std::atomic<bool> sleeping_{false};
  std::atomic<uint64_t> wakeups_{0};
  std::unordered_set<IoHandler*> handlers_;
  std::vector<IoHandler*> graveyard_;
  // Tasks that ran this iteration, destroyed at its end with the graveyard: what they hold
  // (a lane's peer, and so the lane) stays alive while the iteration's events are dispatched.
  std::vector<std::function<void()>> ran_;
  int64_t last_tick_ = 0;
};

}  // namespace tetcp
