#include "loop.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

namespace tetcp {

Loop::Loop(int index, int64_t spin_us, int tick_ms)
    : index_(index), spin_us_(spin_us), tick_ms_(tick_ms > 0 ? tick_ms : 1) {
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  evfd_ = epfd_ >= 0 ? eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC) : -1;
  if (!ready()) return;  // errno says why; the owner does not start this loop
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;
  epoll_ctl(epfd_, EPOLL_CTL_ADD, evfd_, &ev);
}

Loop::~Loop() {
  stop();
  if (evfd_ >= 0) close(evfd_);
  if (epfd_ >= 0) close(epfd_);
}

void Loop::start() {
  thread_ = std::thread([this] { run(); });
}

void Loop::post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
    has_tasks_.store(true);
  }
  if (!sleeping_.load()) return;  // running: it checks has_tasks_ before it sleeps
  wakeups_.fetch_add(1, std::memory_order_relaxed);
  uint64_t one = 1;
  ssize_t r = write(evfd_, &one, sizeof one);
  (void)r;
}

void Loop::stop() {
  if (!thread_.joinable()) return;
  post([this] { stopping_ = true; });
  thread_.join();
}

bool Loop::add(int fd, uint32_t events, IoHandler* h) {
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = h;
  handlers_.insert(h);
  return epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) == 0;
}

void Loop::modify(int fd, uint32_t events, IoHandler* h) {
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = h;
  epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev);
}

void Loop::remove(int fd, IoHandler* h) {
  if (fd >= 0) epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
  handlers_.erase(h);
}

void Loop::retire(IoHandler* h, bool destroy) {
  handlers_.erase(h);
  if (destroy) graveyard_.push_back(h);
}

void Loop::run_tasks() {
  std::vector<std::function<void()>> tasks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks.swap(tasks_);
    has_tasks_.store(false, std::memory_order_relaxed);  // a later post sets it again under mu_
  }
  for (auto& t : tasks) t();
  // Kept until the end of the iteration: epoll_wait already returned events for handlers
  // whose last owner may be one of these tasks (Lane::shut keeps its peer, which owns the lane).
  if (ran_.empty()) {
    ran_.swap(tasks);
  } else {
    for (auto& t : tasks) ran_.push_back(std::move(t));
  }
}

void Loop::run() {
  // Named so per-thread CPU figures (bench/per-request.mjs, top -H) say which thread is which.
  pthread_setname_np(pthread_self(), ("te-tcp-io" + std::to_string(index_)).c_str());
  epoll_event events[128];
  last_tick_ = now_ms();
  const int64_t spin_us = spin_us_;
  int64_t busy_until = 0;  // steady-clock µs until which an empty poll does not sleep
  while (!stopping_) {
    // Busy-poll window: right after events, poll without sleeping for a short while, since
    // the next response or request usually follows within microseconds; sleeping and being
    // woken again costs two context switches per round trip.
    int timeout = tick_ms_;
    if (spin_us > 0 && now_us() < busy_until) timeout = 0;
    if (timeout != 0) {
      sleeping_.store(true);
      if (has_tasks_.load()) timeout = 0;  // posted before it saw this loop asleep
    }
    int n = epoll_wait(epfd_, events, 128, timeout);
    sleeping_.store(false, std::memory_order_relaxed);
    if (n > 0 && spin_us > 0) busy_until = now_us() + spin_us;
    if (has_tasks_.load(std::memory_order_acquire)) run_tasks();
    for (int i = 0; i < n; ++i) {
      auto* h = static_cast<IoHandler*>(events[i].data.ptr);
      if (h == nullptr) {
        uint64_t v;  // the wake-up; its tasks ran above
        ssize_t r = read(evfd_, &v, sizeof v);
        (void)r;
        continue;
      }
      if (handlers_.count(h) && !h->closed) h->on_event(events[i].events);
    }
    int64_t now = now_ms();
    if (now - last_tick_ >= tick_ms_) {
      last_tick_ = now;
      std::vector<IoHandler*> hs(handlers_.begin(), handlers_.end());
      for (auto* h : hs)
        if (handlers_.count(h) && !h->closed) h->on_tick(now);
    }
    for (auto* h : graveyard_) delete h;
    graveyard_.clear();
    ran_.clear();
  }
  // Shutdown: finish queued tasks (they see stopping()), then close every handler.
  run_tasks();
  std::vector<IoHandler*> hs(handlers_.begin(), handlers_.end());
  for (auto* h : hs)
    if (handlers_.count(h)) h->on_shutdown();
  run_tasks();
  for (auto* h : graveyard_) delete h;
  graveyard_.clear();
  ran_.clear();
}

}  // namespace tetcp
