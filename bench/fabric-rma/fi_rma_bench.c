// Raw libfabric RMA between two processes: the ceiling te's transports are compared with.
// No te code is involved: a target process registers a buffer and polls its completion
// queue (providers such as tcp;ofi_rxm progress data only when polled); an initiator keeps
// `window` fi_write or fi_read operations in flight against it for a fixed time, after an
// untimed warm-up pass over the whole working set (connections made, pages warm). Operations
// walk the working set in turn (--span: the bytes te's run touches, so a baseline of a few
// operations in flight does not stay in the caches while te streams from memory). Before
// the clock starts the initiator gives every byte it will send (or receive into) a new value,
// and the run ends only once every position was timed at least once: the check afterwards
// (a checksum computed on both sides over the whole working set) sees only timed bytes.
//
// Long file: the baseline is one self-contained C program (initiator, target, verification)
// that bench/lib/c-bench.mjs compiles from this one source with the system compiler alone.
//
//   fi_rma_bench --op write|read --size BYTES --window N --seconds S [--provider tcp;ofi_rxm]
//                [--endpoints E]   (E endpoint pairs, each with its own domain, CQ and
//                                   polling thread on both sides, as te runs one per rail)
//                [--iov K]         (K consecutive slots per operation: one multi-iov
//                                   fi_writemsg/fi_readmsg, as te groups a batch's requests)
//                [--span BYTES]    (working set per side, all endpoints together; default
//                                   and minimum: window × K × size, one position per operation)
//                [--delivery-complete]   (writes complete once applied at the target)
//                [--fence-every N] (every Nth write of an endpoint asks for delivery completion,
//                                   the writes before it complete once sent: te's write fence,
//                                   one per batch; 1 is --delivery-complete)
//                [--third-thread ON_US:OFF_US]
//                [--corrupt-one-byte]    (the verifier's own test: one byte of the timed
//                                         destination is flipped before the check, which must fail)
//                [--drop-timed-position] (the verifier's other test: endpoint 0's last position
//                                         is never sent while timed, though counted; the check
//                                         must fail, as it did not when only the warm-up was seen)
//
// The window is the operations in flight over all endpoints (split evenly); each operation
// carries K slots, so window × K requests are in flight.
//
// --third-thread adds a thread to the initiator that spins ON_US microseconds, sleeps
// OFF_US, and so on: the load te's JS thread puts beside its transport threads (woken for
// each completion, busy a fraction of the time). On a host with no spare core it shows how
// much the baseline itself loses to one more runnable thread.
//
// Prints one JSON line: op, size, window, endpoints, iov, provider, span, ops, requests, seconds,
// bytesPerSecond, requestsPerSecond, p50Us, p99Us, verified. Exit status 0 only when verified.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_ADDR 256
#define MAX_SAMPLES (1 << 20)
#define MAX_ENDPOINTS 16
#define MAX_IOV 8

struct options {
  int write;
  size_t size;
  int window;     // operations in flight, all endpoints together
  int endpoints;  // endpoint pairs, one polling thread each per side
  int iov;        // slots per operation
  double seconds;
  const char *provider;
  int fence_every;        // --fence-every: every Nth write asks for delivery completion (0: none)
  unsigned third_on_us, third_off_us;  // --third-thread; 0:0 = none
  int corrupt;            // --corrupt-one-byte
  size_t span;            // --span: working set per side (0: one position per operation)
  int drop_timed;         // --drop-timed-position
};

// What the target tells the initiator about one endpoint (over a socketpair, before the run).
struct target_info {
  uint64_t key;
  uint64_t base;  // remote address of the buffer's first byte (0 unless FI_MR_VIRT_ADDR)
  uint64_t bytes;
  uint64_t addrlen;
  uint8_t addr[MAX_ADDR];
};

struct fabric {
  struct fi_info *info;
  struct fid_fabric *fabric;
  struct fid_domain *domain;
  struct fid_cq *cq;
  struct fid_av *av;
  struct fid_ep *ep;
  struct fid_mr *mr;
  void *desc;
  uint8_t *buf;
  size_t bytes;
};

static void die(const char *what, int rc) {
  fprintf(stderr, "fi_rma_bench: %s: %s\n", what, rc < 0 ? fi_strerror(-rc) : strerror(errno));
  exit(2);
}

#define CHECK(call)                    \
  do {                                 \
    int rc_ = (call);                  \
    if (rc_) die(#call, rc_);          \
  } while (0)

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static uint8_t pattern(size_t i) { return (uint8_t)(i * 31 + 7 + (i >> 12)); }

// FNV-1a over 64-bit words: both sides hash the same slots the same way.
static uint64_t checksum(const uint8_t *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static void write_all(int fd, const void *p, size_t n) {
  const uint8_t *b = p;
  while (n) {
    ssize_t w = write(fd, b, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) die("write to the other process", 0);
    b += w;
    n -= (size_t)w;
  }
}

static void read_all(int fd, void *p, size_t n) {
  uint8_t *b = p;
  while (n) {
    ssize_t r = read(fd, b, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) die("read from the other process", 0);
    b += r;
    n -= (size_t)r;
  }
}

// Operations one endpoint keeps in flight: its share of the window (at least one).
static int window_of(const struct options *o, int e) {
  int w = o->window / o->endpoints + (e < o->window % o->endpoints);
  return w < 1 ? 1 : w;
}

// Positions (operation-sized pieces of the working set) one endpoint walks: its share of the
// span, never fewer than its operations in flight.
static size_t positions_of(const struct options *o, int e) {
  const size_t op_bytes = (size_t)o->iov * o->size;
  const size_t share = o->span / (size_t)o->endpoints / op_bytes;
  return share > (size_t)window_of(o, e) ? share : (size_t)window_of(o, e);
}

static size_t bytes_of(const struct options *o, int e) { return positions_of(o, e) * (size_t)o->iov * o->size; }

// What the initiator sends (writes) before the clock starts, and again, every byte changed, while timed.
static uint8_t source_byte(size_t i, int e, int timed) { return pattern(i * 3 + 1 + (size_t)e) ^ (timed ? 0xa5 : 0); }

// What the target holds for reads, and (every byte changed) what a read's landing buffer holds before the clock starts.
static uint8_t target_byte(size_t i, int e, int stale) { return pattern(i + (size_t)e) ^ (stale ? 0xa5 : 0); }

static void open_fabric(struct fabric *f, const struct options *o, int window, size_t bytes) {
  struct fi_info *hints = fi_allocinfo();
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  hints->mode = FI_CONTEXT;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  hints->fabric_attr->prov_name = strdup(o->provider);
  CHECK(fi_getinfo(FI_VERSION(1, 9), "127.0.0.1", NULL, FI_SOURCE, hints, &f->info));
  fi_freeinfo(hints);
  if (o->iov > 1 && (f->info->tx_attr->iov_limit < (size_t)o->iov || f->info->tx_attr->rma_iov_limit < (size_t)o->iov)) {
    fprintf(stderr, "fi_rma_bench: %s takes at most %zu iovs per operation, --iov %d asked\n", o->provider,
            f->info->tx_attr->iov_limit < f->info->tx_attr->rma_iov_limit ? f->info->tx_attr->iov_limit : f->info->tx_attr->rma_iov_limit, o->iov);
    exit(2);
  }
  CHECK(fi_fabric(f->info->fabric_attr, &f->fabric, NULL));
  CHECK(fi_domain(f->fabric, f->info, &f->domain, NULL));
  struct fi_cq_attr cq = {.format = FI_CQ_FORMAT_CONTEXT, .size = (size_t)window * 2 + 64};
  CHECK(fi_cq_open(f->domain, &cq, &f->cq, NULL));
  struct fi_av_attr av = {.type = FI_AV_TABLE};
  CHECK(fi_av_open(f->domain, &av, &f->av, NULL));
  CHECK(fi_endpoint(f->domain, f->info, &f->ep, NULL));
  CHECK(fi_ep_bind(f->ep, &f->cq->fid, FI_TRANSMIT | FI_RECV));
  CHECK(fi_ep_bind(f->ep, &f->av->fid, 0));
  CHECK(fi_enable(f->ep));
  f->bytes = bytes;
  if (posix_memalign((void **)&f->buf, 4096, bytes)) die("posix_memalign", 0);
  memset(f->buf, 0, bytes);  // touched: neither side pays first faults while timed
  CHECK(fi_mr_reg(f->domain, f->buf, bytes, FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 1, 0, &f->mr, NULL));
  f->desc = fi_mr_desc(f->mr);
}

static void close_fabric(struct fabric *f) {
  fi_close(&f->mr->fid);
  fi_close(&f->ep->fid);
  fi_close(&f->av->fid);
  fi_close(&f->cq->fid);
  fi_close(&f->domain->fid);
  fi_close(&f->fabric->fid);
  fi_freeinfo(f->info);
  free(f->buf);
}

// ---- target: one polling thread per endpoint until the initiator says stop ----

static atomic_int target_stop;

static void *target_poll(void *arg) {
  struct fabric *f = arg;
  while (!atomic_load_explicit(&target_stop, memory_order_relaxed)) {
    struct fi_cq_entry e[16];
    fi_cq_read(f->cq, e, 16);  // drives the provider's progress; the target posts nothing
  }
  return NULL;
}

// Serves RMA until the initiator says stop, then returns each endpoint's checksum of the
// bytes it was told about (with --corrupt-one-byte, after flipping one of them on a write).
static int run_target(int sock, const struct options *o) {
  struct fabric f[MAX_ENDPOINTS];
  pthread_t threads[MAX_ENDPOINTS];
  for (int e = 0; e < o->endpoints; ++e) {
    open_fabric(&f[e], o, window_of(o, e), bytes_of(o, e));
    for (size_t i = 0; i < f[e].bytes; ++i) f[e].buf[i] = target_byte(i, e, 0);  // what a READ must return
    struct target_info ti = {0};
    ti.key = fi_mr_key(f[e].mr);
    ti.base = (f[e].info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)f[e].buf : 0;
    ti.bytes = f[e].bytes;
    size_t len = MAX_ADDR;
    CHECK(fi_getname(&f[e].ep->fid, ti.addr, &len));
    ti.addrlen = len;
    write_all(sock, &ti, sizeof ti);
  }
  for (int e = 0; e < o->endpoints; ++e)
    if (pthread_create(&threads[e], NULL, target_poll, &f[e])) die("pthread_create", 0);
  uint64_t verify_bytes[MAX_ENDPOINTS];
  struct pollfd pfd = {.fd = sock, .events = POLLIN};
  while (poll(&pfd, 1, -1) < 0 && errno == EINTR) {
  }
  read_all(sock, verify_bytes, sizeof(uint64_t) * (size_t)o->endpoints);
  atomic_store(&target_stop, 1);
  for (int e = 0; e < o->endpoints; ++e) pthread_join(threads[e], NULL);
  if (o->corrupt && o->write) f[o->endpoints - 1].buf[verify_bytes[o->endpoints - 1] / 2] ^= 0xff;
  uint64_t sums[MAX_ENDPOINTS];
  for (int e = 0; e < o->endpoints; ++e) sums[e] = checksum(f[e].buf, verify_bytes[e]);
  write_all(sock, sums, sizeof(uint64_t) * (size_t)o->endpoints);
  for (int e = 0; e < o->endpoints; ++e) close_fabric(&f[e]);
  return 0;
}

// ---- initiator: one thread per endpoint, each keeping its share of the window in flight ----

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

struct slot {
  struct fi_context ctx;  // first: a completion's op_context points here
  double posted;
  size_t pos;  // the position of the working set its operation moves
};

struct worker {
  const struct options *o;
  int e;
  struct target_info ti;
  struct fabric f;
  pthread_barrier_t *barrier;  // every endpoint's warm-up done: the timed run starts
  double start, until, end;
  uint64_t ops;
  uint64_t posted;  // operations posted (the fence count)
  uint32_t *samples;
  size_t nsamples;
  int failed;
};

// One endpoint's run: its slots, which of them wait to be posted, and where the run is.
struct run {
  fi_addr_t peer;
  int window;
  size_t op_bytes;
  size_t positions, next;  // the working set's positions; the next one to post
  void *descs[MAX_IOV];
  struct slot *slots;
  // Slots ready to post (every one at first); a completed slot is posted again until the time
  // is up. A slot's context stays where it is while its operation is in flight.
  struct slot **ready;
  int nready, inflight, stopping, warm;
  // The run ends only once every position completed at least once: the verification compares
  // the whole working set, and under load the first posts of a large window can outlast a short run.
  uint8_t *completed_once;
  size_t never_completed;
};

// Posts slot `s`'s operation; what the provider returned.
static ssize_t post_slot(struct worker *w, struct run *r, struct slot *s) {
  const struct options *o = w->o;
  struct fabric *f = &w->f;
  uint8_t *local = f->buf + s->pos * r->op_bytes;
  uint64_t remote = w->ti.base + (uint64_t)s->pos * r->op_bytes;
  s->posted = now_s();
  const int fence = o->write && o->fence_every > 0 && (w->posted + 1) % (uint64_t)o->fence_every == 0;
  if (o->iov > 1 || fence) {
    struct iovec iov[MAX_IOV];
    struct fi_rma_iov rma[MAX_IOV];
    for (int k = 0; k < o->iov; ++k) {
      iov[k] = (struct iovec){.iov_base = local + (size_t)k * o->size, .iov_len = o->size};
      rma[k] = (struct fi_rma_iov){.addr = remote + (uint64_t)k * o->size, .len = o->size, .key = w->ti.key};
    }
    struct fi_msg_rma msg = {.msg_iov = iov, .desc = r->descs, .iov_count = (size_t)o->iov, .addr = r->peer,
                             .rma_iov = rma, .rma_iov_count = (size_t)o->iov, .context = &s->ctx};
    uint64_t flags = FI_COMPLETION | (fence ? FI_DELIVERY_COMPLETE : 0);
    return o->write ? fi_writemsg(f->ep, &msg, flags) : fi_readmsg(f->ep, &msg, flags);
  }
  return o->write ? fi_write(f->ep, local, o->size, f->desc, r->peer, remote, w->ti.key, &s->ctx)
                  : fi_read(f->ep, local, o->size, f->desc, r->peer, remote, w->ti.key, &s->ctx);
}

// A slot's operation is done: its position counts as covered, and the slot is ready again
// (or the run stops, once its time is up and every position was covered).
static void settle(struct worker *w, struct run *r, struct slot *s, double t) {
  ++w->ops;
  if (w->nsamples < MAX_SAMPLES) w->samples[w->nsamples++] = (uint32_t)((t - s->posted) * 1e6);
  if (!r->completed_once[s->pos]) {
    r->completed_once[s->pos] = 1;
    --r->never_completed;
  }
  if (t >= w->until && r->never_completed == 0) {
    r->stopping = 1;
    return;
  }
  r->ready[r->nready++] = s;
}

// Posts the ready slots until none is left or the provider is full, each at the working
// set's next position.
static void post_ready(struct worker *w, struct run *r) {
  while (!r->stopping && r->nready > 0) {
    struct slot *s = r->ready[r->nready - 1];
    s->pos = r->next;
    // --drop-timed-position: the verifier's test skips one position's operations while timed.
    if (w->o->drop_timed && !r->warm && w->e == 0 && s->pos == r->positions - 1) {
      r->next = (r->next + 1) % r->positions;
      --r->nready;
      s->posted = now_s();
      settle(w, r, s, s->posted);
      continue;
    }
    ssize_t rc = post_slot(w, r, s);
    if (rc == -FI_EAGAIN) break;  // the provider is full: poll, then retry
    if (rc) die(w->o->write ? "fi_write" : "fi_read", (int)rc);
    ++w->posted;
    r->next = (r->next + 1) % r->positions;
    ++r->inflight;
    --r->nready;
  }
}

// Reads completions: 1 when some were handled (each slot ready again, or the run stopping
// once its time is up), 0 when there were none, -1 when an operation failed.
static int reap(struct worker *w, struct run *r) {
  struct fi_cq_entry e[64];
  ssize_t n = fi_cq_read(w->f.cq, e, 64);
  if (n == -FI_EAGAIN) return 0;
  if (n < 0) {
    struct fi_cq_err_entry err = {0};
    fi_cq_readerr(w->f.cq, &err, 0);
    fprintf(stderr, "fi_rma_bench: operation failed: %s\n", fi_strerror(err.err));
    w->failed = 1;
    if (r->warm) pthread_barrier_wait(w->barrier);  // the others wait for every endpoint's warm-up
    return -1;
  }
  const double t = now_s();
  for (ssize_t k = 0; k < n; ++k) {
    --r->inflight;
    settle(w, r, (struct slot *)e[k].op_context, t);
  }
  w->end = t;
  return 1;
}

// The warm-up is done: every byte the timed run moves gets a new value (the source for a
// write, the landing buffer for a read), so the check afterwards cannot pass on what the
// warm-up left; once every endpoint is ready, the clock starts and every slot is posted again.
static void start_timed_run(struct worker *w, struct run *r) {
  r->warm = 0;
  r->stopping = 0;
  for (size_t i = 0; i < w->f.bytes; ++i) w->f.buf[i] = w->o->write ? source_byte(i, w->e, 1) : target_byte(i, w->e, 1);
  pthread_barrier_wait(w->barrier);
  w->start = now_s();
  w->until = w->start + w->o->seconds;
  w->ops = 0;
  w->nsamples = 0;
  memset(r->completed_once, 0, r->positions);
  r->never_completed = r->positions;
  r->next = 0;
  for (int i = r->nready = 0; i < r->window; ++i) r->ready[r->nready++] = &r->slots[i];
}

// Plain writes complete once sent, and the target stops polling (so stops applying) when
// told to: one delivery-complete write of position 0's own bytes, after the others on the
// same connection (which the socket providers apply in order), flushes them before the
// check, and is timed.
static void flush_writes(struct worker *w, struct run *r) {
  const struct options *o = w->o;
  struct fabric *f = &w->f;
  struct iovec iov = {.iov_base = f->buf, .iov_len = o->size};
  struct fi_rma_iov rma = {.addr = w->ti.base, .len = o->size, .key = w->ti.key};
  struct fi_msg_rma msg = {.msg_iov = &iov, .desc = r->descs, .iov_count = 1, .addr = r->peer, .rma_iov = &rma, .rma_iov_count = 1, .context = &r->slots[0].ctx};
  ssize_t rc;
  while ((rc = fi_writemsg(f->ep, &msg, FI_COMPLETION | FI_DELIVERY_COMPLETE)) == -FI_EAGAIN) fi_cq_read(f->cq, NULL, 0);
  if (rc) die("fi_writemsg (flush)", (int)rc);
  struct fi_cq_entry e;
  ssize_t n;
  while ((n = fi_cq_read(f->cq, &e, 1)) == -FI_EAGAIN) {
  }
  if (n < 0) w->failed = 1;
}

static void *initiator_run(void *arg) {
  struct worker *w = arg;
  const struct options *o = w->o;
  struct run r = {.window = window_of(o, w->e), .op_bytes = (size_t)o->iov * o->size, .positions = positions_of(o, w->e), .warm = 1};
  if (fi_av_insert(w->f.av, w->ti.addr, 1, &r.peer, 0, NULL) != 1) die("fi_av_insert", -FI_EINVAL);
  r.slots = calloc((size_t)r.window, sizeof *r.slots);
  r.ready = malloc(sizeof(struct slot *) * (size_t)r.window);
  r.completed_once = calloc(r.positions, 1);
  r.never_completed = r.positions;
  for (int i = 0; i < r.window; ++i) r.ready[r.nready++] = &r.slots[i];
  for (int k = 0; k < MAX_IOV; ++k) r.descs[k] = w->f.desc;
  // Untimed warm-up: every position once (connections made, pages warm), then all endpoints
  // start the clock together.
  w->until = 0;
  for (;;) {
    post_ready(w, &r);
    if (r.stopping && r.inflight == 0 && !r.warm) break;
    const int got = reap(w, &r);
    if (got < 0) break;
    if (got > 0 && r.stopping && r.inflight == 0 && r.warm) start_timed_run(w, &r);
  }
  // The clock stops once every timed write has landed: a plain write completes once sent, and
  // with a large window tens of MiB can still be on their way when the last completion comes.
  if (o->write && o->fence_every != 1 && !w->failed) {
    flush_writes(w, &r);
    w->end = now_s();
  }
  free(r.completed_once);
  free(r.ready);
  free(r.slots);
  return NULL;
}

static int run_initiator(int sock, const struct options *o) {
  struct worker *w = calloc((size_t)o->endpoints, sizeof *w);
  for (int e = 0; e < o->endpoints; ++e) {
    w[e].o = o;
    w[e].e = e;
    open_fabric(&w[e].f, o, window_of(o, e), bytes_of(o, e));
    read_all(sock, &w[e].ti, sizeof w[e].ti);
    if (o->write)
      for (size_t i = 0; i < w[e].f.bytes; ++i) w[e].f.buf[i] = source_byte(i, e, 0);
    w[e].samples = malloc(sizeof(uint32_t) * MAX_SAMPLES);
  }
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, (unsigned)o->endpoints);
  pthread_t threads[MAX_ENDPOINTS];
  for (int e = 0; e < o->endpoints; ++e) {
    w[e].barrier = &barrier;
    if (pthread_create(&threads[e], NULL, initiator_run, &w[e])) die("pthread_create", 0);
  }
  for (int e = 0; e < o->endpoints; ++e) pthread_join(threads[e], NULL);
  pthread_barrier_destroy(&barrier);
  double start = w[0].start;
  for (int e = 1; e < o->endpoints; ++e)
    if (w[e].start < start) start = w[e].start;
  // Every position was written (or read) at least once while timed: compare each endpoint's
  // whole working set.
  uint64_t verify[MAX_ENDPOINTS], remote_sum[MAX_ENDPOINTS];
  for (int e = 0; e < o->endpoints; ++e) verify[e] = w[e].f.bytes;
  write_all(sock, verify, sizeof(uint64_t) * (size_t)o->endpoints);
  read_all(sock, remote_sum, sizeof(uint64_t) * (size_t)o->endpoints);
  if (o->corrupt && !o->write) w[o->endpoints - 1].f.buf[verify[o->endpoints - 1] / 2] ^= 0xff;
  int verified = 1, failed = 0;
  uint64_t ops = 0;
  double end = start;
  size_t nsamples = 0;
  for (int e = 0; e < o->endpoints; ++e) {
    failed |= w[e].failed;
    ops += w[e].ops;
    if (w[e].end > end) end = w[e].end;
    nsamples += w[e].nsamples;
    if (o->write) {
      verified &= remote_sum[e] == checksum(w[e].f.buf, verify[e]);
    } else {
      uint8_t *want = malloc(verify[e]);
      for (size_t i = 0; i < verify[e]; ++i) want[i] = target_byte(i, e, 0);
      verified &= remote_sum[e] == checksum(want, verify[e]) && memcmp(want, w[e].f.buf, verify[e]) == 0;
      free(want);
    }
  }
  verified &= !failed;
  uint32_t *samples = malloc(sizeof(uint32_t) * (nsamples ? nsamples : 1));
  for (int e = 0, at = 0; e < o->endpoints; ++e) {
    memcpy(samples + at, w[e].samples, sizeof(uint32_t) * w[e].nsamples);
    at += (int)w[e].nsamples;
  }
  qsort(samples, nsamples, sizeof *samples, cmp_u32);
  const double secs = end - start;
  size_t span = 0;  // the working set walked, per side
  for (int e = 0; e < o->endpoints; ++e) span += w[e].f.bytes;
  const uint64_t requests = ops * (uint64_t)o->iov;
  printf("{\"op\":\"%s\",\"deliveryComplete\":%s,\"fenceEvery\":%d,\"size\":%zu,\"window\":%d,\"endpoints\":%d,\"iov\":%d,\"provider\":\"%s\",\"thirdThread\":\"%u:%u\","
         "\"span\":%zu,\"ops\":%llu,\"requests\":%llu,\"seconds\":%.3f,\"bytesPerSecond\":%.0f,\"requestsPerSecond\":%.0f,\"p50Us\":%u,\"p99Us\":%u,\"verified\":%s}\n",
         o->write ? "write" : "read", o->write && o->fence_every == 1 ? "true" : "false", o->write ? o->fence_every : 0, o->size, o->window, o->endpoints, o->iov, o->provider,
         o->third_on_us, o->third_off_us, span, (unsigned long long)ops, (unsigned long long)requests, secs, requests * (double)o->size / secs,
         requests / secs, nsamples ? samples[nsamples / 2] : 0, nsamples ? samples[(size_t)(nsamples * 0.99)] : 0, verified ? "true" : "false");
  free(samples);
  for (int e = 0; e < o->endpoints; ++e) {
    free(w[e].samples);
    close_fabric(&w[e].f);
  }
  free(w);
  return verified ? 0 : 1;
}

static volatile int third_stop;

static void *third_thread(void *arg) {
  const struct options *o = arg;
  while (!third_stop) {
    const double until = now_s() + o->third_on_us * 1e-6;
    while (now_s() < until) {
    }
    if (o->third_off_us) usleep(o->third_off_us);
  }
  return NULL;
}

static void usage(void) {
  fprintf(stderr,
          "usage: fi_rma_bench --op write|read --size BYTES --window N --seconds S [--provider P] [--endpoints E] [--iov K]\n"
          "                    [--span BYTES] [--delivery-complete] [--fence-every N] [--third-thread ON_US:OFF_US] [--corrupt-one-byte]\n"
          "                    [--drop-timed-position]\n");
}

// Reads the command line into `o` (its defaults already set): 0, or 2 after a message
// when an option is unknown or out of range.
static int parse_options(int argc, char **argv, struct options *o) {
  static struct option longs[] = {{"op", required_argument, 0, 'o'},       {"size", required_argument, 0, 's'},
                                  {"window", required_argument, 0, 'w'},   {"seconds", required_argument, 0, 't'},
                                  {"provider", required_argument, 0, 'p'}, {"delivery-complete", no_argument, 0, 'd'},
                                  {"fence-every", required_argument, 0, 'F'},
                                  {"third-thread", required_argument, 0, 'x'}, {"endpoints", required_argument, 0, 'e'},
                                  {"iov", required_argument, 0, 'k'},      {"corrupt-one-byte", no_argument, 0, 'c'},
                                  {"span", required_argument, 0, 'S'},     {"drop-timed-position", no_argument, 0, 'D'},
                                  {0, 0, 0, 0}};
  for (int c; (c = getopt_long(argc, argv, "", longs, NULL)) != -1;) {
    switch (c) {
      case 'o': o->write = strcmp(optarg, "read") != 0; break;
      case 's': o->size = strtoull(optarg, NULL, 0); break;
      case 'w': o->window = atoi(optarg); break;
      case 't': o->seconds = atof(optarg); break;
      case 'p': o->provider = optarg; break;
      case 'd': o->fence_every = 1; break;
      case 'F': {
        char *end = NULL;
        long n = strtol(optarg, &end, 10);
        if (!end || *end || n < 1 || n > 1 << 20) {
          fprintf(stderr, "fi_rma_bench: --fence-every takes a number of writes from 1 to 1048576, got %s\n", optarg);
          return 2;
        }
        o->fence_every = (int)n;
        break;
      }
      case 'e': o->endpoints = atoi(optarg); break;
      case 'k': o->iov = atoi(optarg); break;
      case 'c': o->corrupt = 1; break;
      case 'S': {
        char *end = NULL;
        o->span = strtoull(optarg, &end, 0);
        if (!end || *end || o->span == 0) {
          fprintf(stderr, "fi_rma_bench: --span takes a positive number of bytes, got %s\n", optarg);
          return 2;
        }
        break;
      }
      case 'D': o->drop_timed = 1; break;
      case 'x':
        if (sscanf(optarg, "%u:%u", &o->third_on_us, &o->third_off_us) != 2 || o->third_on_us == 0) {
          fprintf(stderr, "fi_rma_bench: --third-thread takes ON_US:OFF_US with ON_US > 0, e.g. 30:90\n");
          return 2;
        }
        break;
      default:
        usage();
        return 2;
    }
  }
  if (o->size == 0 || o->window < 1 || o->seconds <= 0) {
    fprintf(stderr, "fi_rma_bench: --size, --window and --seconds must be positive\n");
    return 2;
  }
  if (o->endpoints < 1 || o->endpoints > MAX_ENDPOINTS || o->iov < 1 || o->iov > MAX_IOV) {
    fprintf(stderr, "fi_rma_bench: --endpoints takes 1 to %d, --iov 1 to %d\n", MAX_ENDPOINTS, MAX_IOV);
    return 2;
  }
  // The end-of-run flush rewrites position 0, so the dropped position is the last: there must be two.
  if (o->drop_timed && positions_of(o, 0) < 2) {
    fprintf(stderr, "fi_rma_bench: --drop-timed-position needs endpoint 0 to walk at least 2 positions (a larger --window or --span)\n");
    return 2;
  }
  return 0;
}

int main(int argc, char **argv) {
  struct options o = {.write = 1, .size = 1 << 20, .window = 4, .endpoints = 1, .iov = 1, .seconds = 2, .provider = "tcp;ofi_rxm"};
  if (parse_options(argc, argv, &o)) return 2;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) die("socketpair", 0);
  pid_t child = fork();
  if (child < 0) die("fork", 0);
  if (child == 0) {
    close(sv[0]);
    _exit(run_target(sv[1], &o));
  }
  close(sv[1]);
  pthread_t third;
  if (o.third_on_us && pthread_create(&third, NULL, third_thread, &o)) die("pthread_create", 0);
  int rc = run_initiator(sv[0], &o);
  if (o.third_on_us) {
    third_stop = 1;
    pthread_join(third, NULL);
  }
  close(sv[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "fi_rma_bench: the target process failed\n");
    return 1;
  }
  return rc;
}
