// C++ test of the posix-fd server (no GPU needed: it is a unix socket server). A process of
// another user is refused (SO_PEERCRED), one of this user is served. Changing user needs
// root; without it the cross-user case reports itself skipped (exit code 77).
#include "fd_server.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

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

// A process of another user that connects and sends nothing must not hold up this user's
// request: the server answers it without reading. Needs root (changes user). Returns failures.
int silent_other_user_case(const std::string& name) {
  int ready[2];
  if (pipe(ready) != 0) return 1;
  pid_t child = fork();
  if (child == 0) {
    close(ready[0]);
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a;
    socklen_t len = tenvl::fd_socket_address(name, &a);
    if (connect(s, reinterpret_cast<sockaddr*>(&a), len) != 0) _exit(4);
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
  auto t0 = std::chrono::steady_clock::now();
  int fd = -1;
  uint64_t size = 0;
  auto r = tenvl::fetch_fd(name, 12345, 5000, &fd, &size);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  int failures = 0;
  if (!connected) {
    std::fprintf(stderr, "silent other user: the child could not connect\n");
    ++failures;
  }
  if (r.status != te::TE_MEMORY_NOT_REGISTERED || ms > 1000) {
    std::fprintf(stderr,
                 "silent other user: this user's request took %lld ms (status %d); it waited for the silent one\n",
                 static_cast<long long>(ms), r.status);
    ++failures;
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
  std::printf("%s\n", failures ? "FAIL"
                               : "ok   fd server: same user served, other user refused (a silent one holds nothing "
                                 "up), no spin while out of descriptors");
  return failures ? 1 : 0;
}
