// memcpy between two buffers of one process: the ceiling mooncake-shm's same-host copies
// are compared with, given what the transport gets: the same copy threads, pages touched
// (and warmed by one untimed pass) and, where shm asks for them, transparent huge pages.
//
//   memcpy_bench --size BYTES --pool-mib MIB --threads T --seconds S [--huge-pages] [--corrupt-one-byte]
//
// The pool is copied in requests of --size bytes, in whole passes; each of the T threads
// copies its own stripe of requests. Before every pass the first word of each request is
// stamped with the pass number (as the shm benchmark does), and after the run the
// destination must equal the source byte for byte: the check covers the last timed pass.
// --corrupt-one-byte flips one destination byte before the check (the verifier's own test).
//
// Prints one JSON line: size, poolBytes, threads, hugePages, passes, seconds, bytesPerSecond,
// verified. Exit status 0 only when verified.
#define _GNU_SOURCE
#include <getopt.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define MAX_THREADS 64

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

struct shared {
  uint8_t *src, *dst;
  size_t size, requests;
  int threads;
  double until;
  pthread_barrier_t barrier;
  volatile int stop;
  uint64_t passes;
};

struct worker {
  struct shared *s;
  int t;
};

// One pass: stamps (thread 0), then every thread copies its stripe; the clock is read by
// thread 0 between passes, and all threads stop together so the last pass is whole.
static void *run(void *arg) {
  struct worker *w = arg;
  struct shared *s = w->s;
  const size_t per = (s->requests + (size_t)s->threads - 1) / (size_t)s->threads;
  const size_t first = per * (size_t)w->t, last = first + per < s->requests ? first + per : s->requests;
  for (;;) {
    if (w->t == 0) {
      ++s->passes;
      for (size_t r = 0; r < s->requests; ++r) memcpy(s->src + r * s->size, &s->passes, sizeof s->passes);
    }
    pthread_barrier_wait(&s->barrier);
    for (size_t r = first; r < last; ++r) memcpy(s->dst + r * s->size, s->src + r * s->size, s->size);
    pthread_barrier_wait(&s->barrier);
    if (w->t == 0 && now_s() >= s->until) s->stop = 1;
    pthread_barrier_wait(&s->barrier);
    if (s->stop) return NULL;
  }
}

static uint8_t *pool(size_t bytes, int huge) {
  uint8_t *p = NULL;
  if (posix_memalign((void **)&p, 2u << 20, bytes)) {
    fprintf(stderr, "memcpy_bench: cannot allocate %zu bytes\n", bytes);
    exit(2);
  }
  if (huge) madvise(p, bytes, MADV_HUGEPAGE);  // best effort, as shm's hint
  return p;
}

int main(int argc, char **argv) {
  size_t size = 1 << 20, pool_mib = 64;
  int threads = 1, huge = 0, corrupt = 0;
  double seconds = 1;
  static struct option longs[] = {{"size", required_argument, 0, 's'},    {"pool-mib", required_argument, 0, 'p'},
                                  {"threads", required_argument, 0, 't'}, {"seconds", required_argument, 0, 'd'},
                                  {"huge-pages", no_argument, 0, 'h'},    {"corrupt-one-byte", no_argument, 0, 'c'},
                                  {0, 0, 0, 0}};
  for (int c; (c = getopt_long(argc, argv, "", longs, NULL)) != -1;) {
    switch (c) {
      case 's': size = strtoull(optarg, NULL, 0); break;
      case 'p': pool_mib = strtoull(optarg, NULL, 0); break;
      case 't': threads = atoi(optarg); break;
      case 'd': seconds = atof(optarg); break;
      case 'h': huge = 1; break;
      case 'c': corrupt = 1; break;
      default:
        fprintf(stderr, "usage: memcpy_bench --size BYTES --pool-mib MIB --threads T --seconds S [--huge-pages] [--corrupt-one-byte]\n");
        return 2;
    }
  }
  const size_t bytes = pool_mib << 20;
  if (size < 8 || size > bytes || threads < 1 || threads > MAX_THREADS || seconds <= 0) {
    fprintf(stderr, "memcpy_bench: --size from 8 bytes to the pool, --threads 1 to %d, --seconds positive\n", MAX_THREADS);
    return 2;
  }
  struct shared s = {.size = size, .requests = bytes / size, .threads = threads};
  s.src = pool(bytes, huge);
  s.dst = pool(bytes, huge);
  for (size_t i = 0; i < bytes; ++i) s.src[i] = (uint8_t)(i * 131 + (i >> 13));
  memset(s.dst, 0, bytes);                              // touched
  memcpy(s.dst, s.src, s.requests * size);              // and warmed by an untimed pass
  pthread_barrier_init(&s.barrier, NULL, (unsigned)threads);
  struct worker w[MAX_THREADS];
  pthread_t tid[MAX_THREADS];
  const double start = now_s();
  s.until = start + seconds;
  for (int t = 0; t < threads; ++t) {
    w[t] = (struct worker){.s = &s, .t = t};
    if (pthread_create(&tid[t], NULL, run, &w[t])) return 2;
  }
  for (int t = 0; t < threads; ++t) pthread_join(tid[t], NULL);
  const double secs = now_s() - start;
  if (corrupt) s.dst[(s.requests * size) / 2 + 1] ^= 0xff;
  const int verified = memcmp(s.dst, s.src, s.requests * size) == 0;
  printf("{\"size\":%zu,\"poolBytes\":%zu,\"threads\":%d,\"hugePages\":%s,\"passes\":%llu,\"seconds\":%.3f,\"bytesPerSecond\":%.0f,\"verified\":%s}\n",
         size, bytes, threads, huge ? "true" : "false", (unsigned long long)s.passes, secs,
         (double)s.passes * (double)(s.requests * size) / secs, verified ? "true" : "false");
  return verified ? 0 : 1;
}
