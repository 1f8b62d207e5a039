// The I/O loop: its wake-ups, and how long what a task holds lives; cases of tcp_core_test
// (scripts/native-test.sh).
#include "loop.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "check.h"

using namespace tetcp;

// A post to a loop that is running (not asleep in epoll_wait) writes no eventfd: the loop
// takes the task before it sleeps again. Posts from several threads while the loop sleeps,
// runs, or spins are never lost. The loop's tick is 60 s here, so a lost wake-up would leave
// a task waiting that long: the 20 s bounds below catch it without timing anything closely.
void test_post_wakes_only_a_sleeping_loop() {
  Loop loop(0, 0, 60000);
  loop.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // asleep in epoll_wait
  std::atomic<bool> release{false};
  std::atomic<int> ran{0};
  loop.post([&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
  });
  // One write when the loop was asleep; none if its thread had not yet reached epoll_wait.
  const uint64_t first = loop.wakeups();
  CHECK(first <= 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the blocking task is running
  for (int i = 0; i < 1000; ++i) loop.post([&] { ran.fetch_add(1); });
  CHECK(loop.wakeups() == first);  // 1000 posts to a running loop: no eventfd write
  release.store(true);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (ran.load() < 1000 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(ran.load() == 1000);

  // Four posting threads, with pauses that let the loop fall asleep between some posts.
  std::vector<std::thread> posters;
  std::atomic<int> done{0};
  for (int t = 0; t < 4; ++t) {
    posters.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        loop.post([&] { done.fetch_add(1); });
        if ((i + t) % 97 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
      }
    });
  }
  for (auto& th : posters) th.join();
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (done.load() < 8000 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(done.load() == 8000);
  // How many of them found the loop asleep depends on the scheduler: printed, not checked.
  std::printf("  8000 posts from 4 threads: %llu eventfd writes\n",
              static_cast<unsigned long long>(loop.wakeups() - first));
  // Posts to a sleeping loop, one at a time: each wakes it (one eventfd write) and runs.
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    std::atomic<bool> ran_now{false};
    const uint64_t before = loop.wakeups();
    auto t0 = std::chrono::steady_clock::now();
    loop.post([&] { ran_now.store(true); });
    while (!ran_now.load() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20))
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    CHECK(ran_now.load());
    CHECK(loop.wakeups() - before <= 1);
  }
  loop.stop();
}

namespace {

/** A handler on its own eventfd that says when its events come and when it is destroyed. */
struct ProbeHandler : IoHandler {
  int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  std::function<void()> on_readable;
  std::atomic<bool>* destroyed = nullptr;
  ~ProbeHandler() override {
    if (destroyed) destroyed->store(true);
    ::close(fd);
  }
  void on_event(uint32_t) override {
    uint64_t v;
    while (read(fd, &v, sizeof v) > 0) {
    }
    if (on_readable) on_readable();
  }
  void on_shutdown() override { closed = true; }
  void make_readable() const {
    uint64_t one = 1;
    CHECK(write(fd, &one, sizeof one) == sizeof one);
  }
};

}  // namespace

// A task can hold the last owner of a handler whose socket has events in the same epoll_wait
// (Lane::shut keeps the lane's peer, and the peer owns its lanes). The loop dispatched those
// events after the task, and the task's capture, were gone: it read the freed handler's
// `closed`. A task's captures now live until the end of the loop's iteration: here a second
// handler, dispatched in that iteration, sees the first one still alive.
void test_task_keeps_what_it_holds_through_the_iteration() {
  Loop loop(0, 0, 60000);
  loop.start();
  std::atomic<bool> doomed_destroyed{false};
  std::atomic<int> witness_runs{0};
  std::atomic<bool> doomed_seen_alive{false};
  auto doomed = std::make_shared<ProbeHandler>();
  doomed->destroyed = &doomed_destroyed;
  auto* witness = new ProbeHandler();
  witness->on_readable = [&] {
    doomed_seen_alive.store(!doomed_destroyed.load());
    witness_runs.fetch_add(1);
  };
  std::atomic<bool> added{false};
  loop.post([&, d = doomed.get()] {
    loop.add(d->fd, EPOLLIN, d);
    loop.add(witness->fd, EPOLLIN, witness);
    added.store(true);
  });
  while (!added.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));

  // While a task blocks the loop: both handlers become readable, and a task that holds the
  // last owner of `doomed` retires it. The next epoll_wait returns both handlers' events.
  std::atomic<bool> release{false};
  loop.post([&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  doomed->make_readable();
  witness->make_readable();
  loop.post([&, keep = std::move(doomed)] {
    loop.remove(keep->fd, keep.get());
    keep->closed = true;
  });
  doomed.reset();
  release.store(true);

  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((witness_runs.load() == 0 || !doomed_destroyed.load()) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(witness_runs.load() == 1);
  CHECK(doomed_seen_alive.load());  // false before: destroyed as soon as its task had run
  CHECK(doomed_destroyed.load());   // and destroyed at the end of that iteration
  std::atomic<bool> removed{false};
  loop.post([&] {
    loop.remove(witness->fd, witness);
    delete witness;
    removed.store(true);
  });
  while (!removed.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  loop.stop();
}
