// memcpy between two buffers of one process: the ceiling mooncake-shm's same-host copies
// are compared with, given what the transport gets: the same copy threads, pages touched
// (and warmed by one untimed pass), where shm asks for them transparent huge pages, and with
// --shared-source a source of the kind shm's pool memory is (a memfd mapped shared: the
// kernel gives it huge pages only where shmem_enabled allows, unlike private memory).
//
//   memcpy_bench --size BYTES --pool-mib MIB --threads T --seconds S [--huge-pages] [--shared-source] [--corrupt-one-byte]
//
// The pool is copied in requests of --size bytes, in whole passes; each of the T threads
// copies its own stripe of requests. Before every pass the first word of each request is
// stamped with the pass number (as the shm benchmark does), and after the run the
// destination must equal the source byte for byte: the check covers the last timed pass.
// --corrupt-one-byte flips one destination byte before the check (the verifier's own test).
//
// Prints one JSON line: size, poolBytes, threads, hugePages, sharedSource, passes, seconds,
// bytesPerSecond, verified, and sourceHugeShare / destinationHugeShare: the part of each
// buffer the kernel backed with huge pages (from /proc/self/smaps, after the warm pass).
// Exit status 0 only when verified.
#define _GNU_SOURCE
#include <getopt.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

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

// Like shm's pool (plugins/mooncake-shm/native/pools.cpp): a memfd mapped shared, with the same hint.
static uint8_t *shared_pool(size_t bytes, int huge) {
  int fd = memfd_create("memcpy-bench-source", MFD_CLOEXEC);
  void *p = fd < 0 || ftruncate(fd, (off_t)bytes) != 0 ? MAP_FAILED : mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    fprintf(stderr, "memcpy_bench: cannot map %zu bytes of shared memory\n", bytes);
    exit(2);
  }
  if (huge) madvise(p, bytes, MADV_HUGEPAGE);  // shmem follows shmem_enabled, as for shm
  return p;
}

// The part of [p, p + n) the kernel maps with huge pages: the *HugePages / *PmdMapped kB of
// the mappings it overlaps over their Rss kB; -1 when smaps cannot be read.
static double huge_share(const uint8_t *p, size_t n) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  char line[512];
  int inside = 0;
  unsigned long long rss = 0, huge = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long long lo, hi, kb;
    char key[64];
    if (sscanf(line, "%llx-%llx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      inside = lo < (uintptr_t)p + n && hi > (uintptr_t)p;  // the mappings it overlaps
    } else if (inside && sscanf(line, "%63[^:]: %llu kB", key, &kb) == 2) {
      if (!strcmp(key, "Rss")) rss += kb;
      if (!strcmp(key, "AnonHugePages") || !strcmp(key, "ShmemPmdMapped") || !strcmp(key, "FilePmdMapped")) huge += kb;
    }
  }
  fclose(f);
  return rss ? (double)huge / (double)rss : 0;
}

int main(int argc, char **argv) {
  size_t size = 1 << 20, pool_mib = 64;
  int threads = 1, huge = 0, shared = 0, corrupt = 0;
  double seconds = 1;
  static struct option longs[] = {{"size", required_argument, 0, 's'},    {"pool-mib", required_argument, 0, 'p'},
                                  {"threads", required_argument, 0, 't'}, {"seconds", required_argument, 0, 'd'},
                                  {"huge-pages", no_argument, 0, 'h'},    {"corrupt-one-byte", no_argument, 0, 'c'},
                                  {"shared-source", no_argument, 0, 'm'}, {0, 0, 0, 0}};
  for (int c; (c = getopt_long(argc, argv, "", longs, NULL)) != -1;) {
    switch (c) {
      case 's': size = strtoull(optarg, NULL, 0); break;
      case 'p': pool_mib = strtoull(optarg, NULL, 0); break;
      case 't': threads = atoi(optarg); break;
      case 'd': seconds = atof(optarg); break;
      case 'h': huge = 1; break;
      case 'c': corrupt = 1; break;
      case 'm': shared = 1; break;
      default:
        fprintf(stderr, "usage: memcpy_bench --size BYTES --pool-mib MIB --threads T --seconds S [--huge-pages] [--shared-source] [--corrupt-one-byte]\n");
        return 2;
    }
  }
  const size_t bytes = pool_mib << 20;
  if (size < 8 || size > bytes || threads < 1 || threads > MAX_THREADS || seconds <= 0) {
    fprintf(stderr, "memcpy_bench: --size from 8 bytes to the pool, --threads 1 to %d, --seconds positive\n", MAX_THREADS);
    return 2;
  }
  struct shared s = {.size = size, .requests = bytes / size, .threads = threads};
  s.src = shared ? shared_pool(bytes, huge) : pool(bytes, huge);
  s.dst = pool(bytes, huge);
  for (size_t i = 0; i < bytes; ++i) s.src[i] = (uint8_t)(i * 131 + (i >> 13));
  memset(s.dst, 0, bytes);                              // touched
  memcpy(s.dst, s.src, s.requests * size);              // and warmed by an untimed pass
  const double src_huge = huge_share(s.src, bytes), dst_huge = huge_share(s.dst, bytes);
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
  printf("{\"size\":%zu,\"poolBytes\":%zu,\"threads\":%d,\"hugePages\":%s,\"sharedSource\":%s,\"passes\":%llu,\"seconds\":%.3f,"
         "\"bytesPerSecond\":%.0f,\"verified\":%s,\"sourceHugeShare\":%.3f,\"destinationHugeShare\":%.3f}\n",
         size, bytes, threads, huge ? "true" : "false", shared ? "true" : "false", (unsigned long long)s.passes, secs,
         (double)s.passes * (double)(s.requests * size) / secs, verified ? "true" : "false", src_huge, dst_huge);
  return verified ? 0 : 1;
}
