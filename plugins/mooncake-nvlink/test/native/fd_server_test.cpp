// C++ test of the posix-fd server (no GPU needed: it is a unix socket server). A process of
// another user is refused (SO_PEERCRED), one of this user is served. Changing user needs
// root; without it the cross-user case reports itself skipped (exit code 77).
#include "fd_server.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

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
  if (getuid() != 0) {
    std::printf("skip other user: changing user needs root\n");
    tenvl::fd_server_release();
    return failures ? 1 : 77;
  }
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
  std::printf("%s\n", failures ? "FAIL" : "ok   fd server: same user served, other user refused");
  return failures ? 1 : 0;
}
