// The I/O loop's wake-ups, a case of tcp_core_test (scripts/native-test.sh).
#include "loop.h"

#include <atomic>
#include <chrono>
#include <cstdio>
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
