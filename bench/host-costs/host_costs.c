// What two kernel services cost on this host, measured beside a benchmark's figures:
//   - a system call that does no work (getppid), in nanoseconds;
//   - a wake-up round trip: one thread writes an eventfd that a second thread sleeps in read()
//     on, and sleeps until the second writes back; microseconds per round trip, two wake-ups.
// te's transports sleep between events and are woken by the kernel, while the raw baselines
// spin, so te's small batches pay these costs where the baselines do not. On a virtual
// machine they depend on the host, and te's ratios with them: the report prints them beside
// its figures so that a run can be read for what the host charged.
//
//   host_costs [--seconds S]     each measurement runs for about S seconds (default 0.5)
//
// Prints one JSON line: syscallNs, syscalls, wakeRoundTripUs, roundTrips, seconds.
#define _GNU_SOURCE
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

// The clock is read once per batch of calls, so its own cost stays out of the figure.
static double syscall_ns(double seconds, uint64_t *calls) {
  const int batch = 1000;
  uint64_t n = 0;
  const double start = now_s();
  double elapsed;
  do {
    for (int i = 0; i < batch; ++i) syscall(SYS_getppid);
    n += batch;
    elapsed = now_s() - start;
  } while (elapsed < seconds);
  *calls = n;
  return elapsed / (double)n * 1e9;
}

struct pong {
  int ping, back;
  atomic_int stop;
};

// The second thread: sleeps in read() until pinged, answers, until told to stop.
static void *answer(void *arg) {
  struct pong *p = arg;
  for (;;) {
    uint64_t v;
    if (read(p->ping, &v, sizeof v) != sizeof v) return NULL;
    if (atomic_load(&p->stop)) return NULL;
    v = 1;
    if (write(p->back, &v, sizeof v) != sizeof v) return NULL;
  }
}

static int wake_round_trip_us(double seconds, double *us, uint64_t *trips) {
  struct pong p = {.ping = eventfd(0, EFD_CLOEXEC), .back = eventfd(0, EFD_CLOEXEC)};
  if (p.ping < 0 || p.back < 0) return -1;
  pthread_t tid;
  if (pthread_create(&tid, NULL, answer, &p)) return -1;
  uint64_t n = 0, v;
  const double start = now_s();
  double elapsed;
  do {
    v = 1;
    if (write(p.ping, &v, sizeof v) != sizeof v || read(p.back, &v, sizeof v) != sizeof v) return -1;
    ++n;
    elapsed = now_s() - start;
  } while (elapsed < seconds);
  atomic_store(&p.stop, 1);
  v = 1;
  if (write(p.ping, &v, sizeof v) != sizeof v) return -1;
  pthread_join(tid, NULL);
  close(p.ping);
  close(p.back);
  *us = elapsed / (double)n * 1e6;
  *trips = n;
  return 0;
}

int main(int argc, char **argv) {
  double seconds = 0.5;
  static struct option longs[] = {{"seconds", required_argument, 0, 'd'}, {0, 0, 0, 0}};
  for (int c; (c = getopt_long(argc, argv, "", longs, NULL)) != -1;) {
    char *end = NULL;
    switch (c) {
      case 'd':
        seconds = strtod(optarg, &end);
        if (end == optarg || *end != '\0') seconds = -1;
        break;
      default:
        fprintf(stderr, "usage: host_costs [--seconds S]\n");
        return 2;
    }
  }
  if (optind != argc || !(seconds > 0 && seconds <= 60)) {
    fprintf(stderr, "host_costs: --seconds must be a number above 0 and at most 60\n");
    return 2;
  }
  uint64_t calls = 0, trips = 0;
  const double ns = syscall_ns(seconds, &calls);
  double us = 0;
  if (wake_round_trip_us(seconds, &us, &trips) != 0) {
    perror("host_costs: eventfd round trip");
    return 1;
  }
  printf("{\"syscallNs\":%.1f,\"syscalls\":%llu,\"wakeRoundTripUs\":%.2f,\"roundTrips\":%llu,\"seconds\":%.3f}\n", ns,
         (unsigned long long)calls, us, (unsigned long long)trips, seconds);
  return 0;
}
