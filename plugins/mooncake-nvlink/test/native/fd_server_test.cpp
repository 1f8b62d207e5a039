// C++ test of the posix-fd server (no GPU needed: it is a unix socket server). A process of
// another user is refused (SO_PEERCRED), one of this user is served, a silent one of either
// user holds no other up, and a release beside a new acquire ends. Changing user needs
// root; without it the cross-user case reports itself skipped (exit code 77).
#include "fd_server.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace {

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// Out of descriptors, the server cannot accept a waiting client: it must not spin on it, and
// must serve it once descriptors are free again. Returns the number of failures.
int out_of_descriptors_case(const std::string& name) {
  std::vector<int> hoarded;
  for (int f; (f = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) hoarded.push_back(f);
  if (hoarded.empty()) return std::fprintf(stderr, "out of descriptors: could not open any\n"), 1;
  close(hoarded.back());  // the client's socket
  hoarded.pop_back();
  int32_t status = te::TE_OK;
  std::thread client([&] {
    int fd = -1;
    uint64_t size = 0;
    status = tenvl::fetch_fd(name, 12345, 5000, &fd, &size).status;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  double cpu0 = cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  double used = cpu_seconds() - cpu0;
  for (int f : hoarded) close(f);
  client.join();
  int failures = 0;
  if (used > 0.15) {
    std::fprintf(stderr, "out of descriptors: the process used %.2f s of CPU in 0.5 s (the server spins)\n", used);
    ++failures;
  }
  if (status != te::TE_MEMORY_NOT_REGISTERED) {
    std::fprintf(stderr, "out of descriptors: the waiting client was not served once descriptors were free (%d)\n",
                 status);
    ++failures;
  }
  return failures;
}

int connect_raw(const std::string& name) {
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a;
  socklen_t len = tenvl::fd_socket_address(name, &a);
  if (s >= 0 && connect(s, reinterpret_cast<sockaddr*>(&a), len) != 0) {
    close(s);
    return -1;
  }
  return s;
}

// The status of the server's reply on `s`, read within `timeout_ms`; 1 when none came.
int32_t reply_status(int s, int timeout_ms) {
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  struct {
    uint32_t magic;
    int32_t status;
    uint64_t size;
  } rep{};
  return recv(s, &rep, sizeof rep, MSG_WAITALL) == static_cast<ssize_t>(sizeof rep) ? rep.status : 1;
}

// Fetches allocation 12345 (never exported: the server answers MEMORY_NOT_REGISTERED) and
// says how long the answer took.
te::cuda::Error timed_fetch(const std::string& name, long long* ms) {
  auto t0 = std::chrono::steady_clock::now();
  int fd = -1;
  uint64_t size = 0;
  auto r = tenvl::fetch_fd(name, 12345, 5000, &fd, &size);
  *ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// Processes of this user that connect and stay silent, or send half a request, must not hold
// up another's request; each is answered on its own deadline. Returns the number of failures.
int silent_same_user_case(const std::string& name) {
  int failures = 0;
  int silent = connect_raw(name);
  int halting = connect_raw(name);
  if (silent < 0 || halting < 0) return std::fprintf(stderr, "silent same user: cannot connect\n"), 1;
  const uint32_t request[4] = {0x564e4554, 1, 12345, 0};         // magic "TENV", version 1, allocation 12345
  if (send(halting, request, 6, MSG_NOSIGNAL) != 6) ++failures;  // part of a request
  std::this_thread::sleep_for(std::chrono::milliseconds(100));   // the server has taken both up
  long long ms = 0;
  auto r = timed_fetch(name, &ms);
  if (r.status != te::TE_MEMORY_NOT_REGISTERED || ms > 500) {
    std::fprintf(stderr, "silent same user: another request took %lld ms (status %d); it waited for the silent ones\n",
                 ms, r.status);
    ++failures;
  }
  // The rest of the half request completes it: it is answered.
  if (send(halting, reinterpret_cast<const char*>(request) + 6, 10, MSG_NOSIGNAL) != 10) ++failures;
  int32_t completed = reply_status(halting, 1000);
  if (completed != te::TE_MEMORY_NOT_REGISTERED) {
    std::fprintf(stderr, "silent same user: a request sent in two parts was answered %d\n", completed);
    ++failures;
  }
  // The silent one is answered when its deadline (2 s) passes, not left open.
  int32_t timed_out = reply_status(silent, 3000);
  if (timed_out != te::TE_PROTOCOL_MISMATCH) {
    std::fprintf(stderr, "silent same user: the silent connection was answered %d, not PROTOCOL_MISMATCH\n", timed_out);
    ++failures;
  }
  close(silent);
  close(halting);
  return failures;
}

// A process of another user that connects and sends nothing must not hold up this user's
// request: the server answers it without reading. Needs root (changes user). Returns failures.
int silent_other_user_case(const std::string& name) {
  int ready[2];
  if (pipe(ready) != 0) return 1;
  pid_t child = fork();
  if (child == 0) {
    close(ready[0]);
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
    if (connect_raw(name) < 0) _exit(4);
    char one = 1;
    if (write(ready[1], &one, 1) != 1) _exit(5);
    sleep(3);  // connected and silent
    _exit(0);
  }
  close(ready[1]);
  char one = 0;
  bool connected = read(ready[0], &one, 1) == 1;
  close(ready[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the server has taken it up
  long long ms = 0;
  auto r = timed_fetch(name, &ms);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  int failures = 0;
  if (!connected) {
    std::fprintf(stderr, "silent other user: the child could not connect\n");
    ++failures;
  }
  if (r.status != te::TE_MEMORY_NOT_REGISTERED || ms > 1000) {
    std::fprintf(stderr,
                 "silent other user: this user's request took %lld ms (status %d); it waited for the silent one\n", ms,
                 r.status);
    ++failures;
  }
  return failures;
}

// The last user's release stops the server while another transport acquires a new one: the
// release must end (not wait on a server told to go on), and the old server's socket must be
// closed. The old server sits in poll for up to 200 ms when the new acquire comes, so five
// rounds cannot all miss the window. Returns the number of failures.
int release_beside_acquire_case() {
  int failures = 0;
  for (int round = 0; round < 5 && failures == 0; ++round) {
    std::string old_name, new_name;
    if (!tenvl::fd_server_acquire(&old_name).ok())
      return std::fprintf(stderr, "release beside acquire: no server\n"), 1;
    std::atomic<bool> released{false};
    std::thread releaser([&] {
      tenvl::fd_server_release();
      released = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (!tenvl::fd_server_acquire(&new_name).ok()) ++failures;
    for (int i = 0; i < 200 && !released; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!released) {
      std::fprintf(stderr, "release beside acquire: the release did not end within 2 s (round %d)\n", round);
      std::fflush(stderr);
      _exit(1);  // the releasing thread is stuck in join: it cannot be joined here
    }
    releaser.join();
    const int stale = connect_raw(old_name);
    if (stale >= 0) {
      std::fprintf(stderr, "release beside acquire: the released server's socket @%s still accepts\n",
                   old_name.c_str());
      close(stale);
      ++failures;
    }
    long long ms = 0;
    if (timed_fetch(new_name, &ms).status != te::TE_MEMORY_NOT_REGISTERED) {
      std::fprintf(stderr, "release beside acquire: the new server does not answer\n");
      ++failures;
    }
    tenvl::fd_server_release();
  }
  return failures;
}

}  // namespace

int main() {
  std::string name;
  auto e = tenvl::fd_server_acquire(&name);
  if (!e.ok()) {
    std::fprintf(stderr, "fd server: %s\n", e.message.c_str());
    return 1;
  }
  int failures = 0;
  // Same user: the server answers (allocation 12345 does not exist, so MEMORY_NOT_REGISTERED).
  int fd = -1;
  uint64_t size = 0;
  auto same = tenvl::fetch_fd(name, 12345, 2000, &fd, &size);
  if (same.status != te::TE_MEMORY_NOT_REGISTERED) {
    std::fprintf(stderr, "same user: expected MEMORY_NOT_REGISTERED, got %d %s\n", same.status, same.message.c_str());
    ++failures;
  }
  failures += out_of_descriptors_case(name);
  failures += silent_same_user_case(name);
  tenvl::fd_server_release();
  failures += release_beside_acquire_case();
  if (!tenvl::fd_server_acquire(&name).ok()) return std::fprintf(stderr, "fd server: cannot start again\n"), 1;
  if (getuid() != 0) {
    std::printf("skip other user: changing user needs root\n");
    tenvl::fd_server_release();
    return failures ? 1 : 77;
  }
  failures += silent_other_user_case(name);
  pid_t child = fork();
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
    int cfd = -1;
    uint64_t csize = 0;
    auto other = tenvl::fetch_fd(name, 12345, 2000, &cfd, &csize);
    std::fprintf(stderr, "other user: %d %s\n", other.status, other.message.c_str());
    _exit(other.status == te::TE_AUTH_FAILED ? 0 : 4);
  }
  int st = 0;
  waitpid(child, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    std::fprintf(stderr, "other user was not refused with AUTH_FAILED (child exit %d)\n",
                 WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    ++failures;
  }
  tenvl::fd_server_release();
  std::printf("%s\n", failures
                          ? "FAIL"
                          : "ok   fd server: same user served, other user refused, silent clients of either "
                            "user hold nothing up, no spin while out of descriptors, a release beside an acquire ends");
  return failures ? 1 : 0;
}
