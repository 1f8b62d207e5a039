// Does MSG_ZEROCOPY pay for mooncake-tcp's large sends? Two processes, one TCP stream: the
// sender sends `size`-byte messages from a ring of `window` slots for a fixed time, either
// with plain send() (the kernel copies into socket buffers) or with MSG_ZEROCOPY (the kernel
// pins the pages and reports, on the socket's error queue, when it no longer needs them;
// a slot is reused only after that report, as a transport would have to). The receiver
// reads into its own buffer and counts bytes.
//
//   zc_bench --size BYTES --window N --seconds S [--zerocopy] [--host 127.0.0.1]
//
// Prints one JSON line: mode, size, window, seconds, bytesPerSecond, and for --zerocopy the
// notifications received and how many of them say the kernel copied after all
// (SO_EE_CODE_ZEROCOPY_COPIED: always the case on loopback, where the receiving socket
// cannot keep the sender's pages).
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef SO_ZEROCOPY
#define SO_ZEROCOPY 60
#endif
#ifndef MSG_ZEROCOPY
#define MSG_ZEROCOPY 0x4000000
#endif

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void die(const char *what) {
  fprintf(stderr, "zc_bench: %s: %s\n", what, strerror(errno));
  exit(1);
}

struct zc_state {
  uint32_t next_id;        // id the kernel gives the next zerocopy send
  uint32_t done_below;     // every send with id < done_below is released
  uint64_t notifications;  // error-queue messages read
  uint64_t copied;         // ... that say the kernel copied anyway
};

// Reads zerocopy completions (ranges of send ids) from the error queue.
static void reap(int fd, struct zc_state *z, int wait_ms) {
  for (;;) {
    if (wait_ms) {
      struct pollfd p = {.fd = fd, .events = 0};
      if (poll(&p, 1, wait_ms) <= 0) return;
    }
    char control[128];
    struct msghdr m = {.msg_control = control, .msg_controllen = sizeof control};
    if (recvmsg(fd, &m, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      die("recvmsg(MSG_ERRQUEUE)");
    }
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
      struct sock_extended_err e;
      memcpy(&e, CMSG_DATA(c), sizeof e);
      if (e.ee_errno != 0 || e.ee_origin != SO_EE_ORIGIN_ZEROCOPY) continue;
      z->notifications++;
      if (e.ee_code & SO_EE_CODE_ZEROCOPY_COPIED) z->copied++;
      if (e.ee_data + 1 > z->done_below) z->done_below = e.ee_data + 1;  // ids ee_info..ee_data
    }
    wait_ms = 0;
  }
}

static int run_sender(int fd, size_t size, int window, double seconds, int zerocopy) {
  char *buf = aligned_alloc(4096, ((size * window) + 4095) / 4096 * 4096);
  memset(buf, 0x5a, size * window);
  if (zerocopy) {
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one)) die("setsockopt(SO_ZEROCOPY)");
  }
  struct zc_state z = {0};
  uint64_t bytes = 0;
  const double start = now_s(), end = start + seconds;
  for (uint64_t msg = 0; now_s() < end; ++msg) {
    const int slot = (int)(msg % (uint64_t)window);
    // A slot's previous send must be released before its bytes may change (a transport
    // would report the request done, and the caller could reuse the memory, only then).
    while (zerocopy && z.next_id >= (uint32_t)window && z.done_below + (uint32_t)window <= z.next_id) reap(fd, &z, 100);
    for (size_t off = 0; off < size;) {
      ssize_t w = send(fd, buf + (size_t)slot * size + off, size - off, zerocopy ? MSG_ZEROCOPY : 0);
      if (w < 0) {
        if (errno == ENOBUFS && zerocopy) {  // optmem exhausted: wait for releases
          reap(fd, &z, 10);
          continue;
        }
        die("send");
      }
      if (zerocopy) z.next_id++;
      off += (size_t)w;
      bytes += (uint64_t)w;
    }
    if (zerocopy) reap(fd, &z, 0);
  }
  const double secs = now_s() - start;
  shutdown(fd, SHUT_WR);
  while (zerocopy && z.done_below < z.next_id) reap(fd, &z, 1000);
  char c;
  (void)!read(fd, &c, 1);  // the receiver closes once it has read everything
  printf("{\"mode\":\"%s\",\"size\":%zu,\"window\":%d,\"seconds\":%.3f,\"bytesPerSecond\":%.0f", zerocopy ? "zerocopy" : "copy", size, window,
         secs, bytes / secs);
  if (zerocopy) printf(",\"sends\":%u,\"notifications\":%llu,\"copiedByKernel\":%llu", z.next_id, (unsigned long long)z.notifications, (unsigned long long)z.copied);
  printf("}\n");
  free(buf);
  return 0;
}

static int run_receiver(int fd, size_t size) {
  const size_t cap = size < (1 << 20) ? (1 << 20) : size;
  char *buf = malloc(cap);
  for (;;) {
    ssize_t r = recv(fd, buf, cap, 0);
    if (r == 0) break;
    if (r < 0) {
      if (errno == EINTR) continue;
      die("recv");
    }
  }
  free(buf);
  return 0;
}

int main(int argc, char **argv) {
  size_t size = 1 << 20;
  int window = 8, zerocopy = 0;
  double seconds = 3;
  const char *host = "127.0.0.1";
  static struct option longs[] = {{"size", required_argument, 0, 's'},    {"window", required_argument, 0, 'w'},
                                  {"seconds", required_argument, 0, 't'}, {"zerocopy", no_argument, 0, 'z'},
                                  {"host", required_argument, 0, 'h'},    {0, 0, 0, 0}};
  for (int c; (c = getopt_long(argc, argv, "", longs, NULL)) != -1;) {
    switch (c) {
      case 's': size = strtoull(optarg, NULL, 0); break;
      case 'w': window = atoi(optarg); break;
      case 't': seconds = atof(optarg); break;
      case 'z': zerocopy = 1; break;
      case 'h': host = optarg; break;
      default:
        fprintf(stderr, "usage: zc_bench --size BYTES --window N --seconds S [--zerocopy] [--host ADDR]\n");
        return 2;
    }
  }
  if (size == 0 || window < 1 || seconds <= 0) {
    fprintf(stderr, "zc_bench: --size, --window and --seconds must be positive\n");
    return 2;
  }
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  if (inet_pton(AF_INET, host, &a.sin_addr) != 1) {
    fprintf(stderr, "zc_bench: --host must be an IPv4 address of this machine\n");
    return 2;
  }
  socklen_t alen = sizeof a;
  if (bind(lfd, (struct sockaddr *)&a, sizeof a) || listen(lfd, 1) || getsockname(lfd, (struct sockaddr *)&a, &alen)) die("listen");
  pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) {
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0) die("accept");
    close(lfd);
    int rc = run_receiver(fd, size);
    close(fd);
    _exit(rc);
  }
  close(lfd);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(fd, (struct sockaddr *)&a, sizeof a)) die("connect");
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  int rc = run_sender(fd, size, window, seconds, zerocopy);
  close(fd);
  int status = 0;
  waitpid(child, &status, 0);
  return rc != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}
