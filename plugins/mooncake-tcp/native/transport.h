// mooncake-tcp transport core (no N-API here): registry, I/O loops, listener, peers with
// lanes, batches. The addon (addon.cpp) wraps it and carries events to JS.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda_staging.h"
#include "loop.h"
#include "served_connections.h"
#include "strided_rows.h"
#include "te/memory_registry.h"
#include "te/notify_budget.h"
#include "te/status.h"
#include "te/transport_event.h"
#include "wire.h"
#include "worker_pool.h"

namespace tetcp {

using te::Status;

struct Options {
  std::string segment_name;
  uint64_t epoch = 0;
  std::string bind_address = "127.0.0.1";
  uint16_t port = 0;
  int io_threads = 2;
  int lanes = 2;
  int connect_timeout_ms = 3000;
  uint64_t slice_size = 1 << 20;
  int socket_buffer = 0;   // 0: kernel autotuning
  std::string congestion;  // TCP_CONGESTION of every data socket; empty: the system's default
  uint64_t window_bytes = 32ull << 20;
  int cancel_grace_ms = 250;
  std::vector<uint8_t> secret;  // empty: no authentication
  // Received notifications not yet taken by the JS thread: per sending peer and in bytes.
  uint64_t notify_queue_per_peer = 1024;
  uint64_t notify_queue_bytes = 64ull << 20;
  // Accepted connections: caps, and how long one may take to handshake or sit idle.
  uint64_t max_connections = 4096;
  uint64_t max_connections_per_address = 1024;
  int64_t handshake_timeout_ms = 5000;
  int64_t idle_timeout_ms = 300000;
  // Threads for CUDA staging copies and same-process copies (started on first use).
  int worker_threads = 2;
  // After events, an I/O loop polls without sleeping for this long (0: never spins).
  int64_t busy_poll_us = 0;
  // The I/O loops run under SCHED_BATCH (te/thread_policy.h): woken, they do not preempt the JS thread.
  bool batch_scheduling = false;
  // Runs of small writes of one batch go out as WRITEV frames (to targets that take them).
  bool coalesce_writes = true;
};

/** Something for the JS thread (the event type every transport core shares). */
using Event = te::TransportEvent;
using EventSink = te::TransportEventSink;

/**
 * A batch's strided rows, per request (see strided_rows.h): write i with local_rows[i] > 1
 * gathers its bytes from that many local rows of lengths[i] / rows bytes, local_pitches[i]
 * apart; with remote_rows[i] > 1 its bytes land in that many remote rows, remote_pitches[i]
 * apart. A null pair: no request has rows on that side.
 */
struct BatchExtras {
  const uint32_t* local_rows = nullptr;
  const uint64_t* local_pitches = nullptr;
  const uint32_t* remote_rows = nullptr;
  const uint64_t* remote_pitches = nullptr;
  /** Verified writes (capabilities.verifiedWrites; wire.h, kFlagDigest). */
  bool verify_writes = false;
};

class Transport;
struct Peer;
struct Batch;

struct Slice {
  Batch* batch = nullptr;
  uint32_t req = 0;
  uint8_t op = 0;  // OP_WRITE, OP_READ or OP_NOTIFY
  uint32_t lane = 0;
  uint64_t local = 0;
  uint64_t remote = 0;
  uint64_t len = 0;
  uint64_t span_addr = 0;  // the whole request's remote range (validated as one by the target)
  uint64_t span_len = 0;
  int device = kHost;  // device of the local range (kHost: host memory), looked up at submit
  uint8_t hdr[kHeaderSize];
  // Its frame (set when it enters a lane's window): a frame of its own (frame_n 1, hdr), the
  // head of a WRITEV frame of frame_n slices (vhead: its header and table; hdr: the header
  // alone, for the answer's id), or a segment riding in the WRITEV frame before it (frame_n 0,
  // no bytes of its own before its body).
  uint32_t frame_n = 1;
  uint32_t head_len = kHeaderSize;
  std::unique_ptr<uint8_t[]> vhead;
  // A verified write (Batch::verify): its body bytes digested so far, in the order sent (the
  // lane offers the socket no byte before it is digested), and the digest once all are.
  uint64_t digest_at = 0;
  uint64_t digest = 0;
  const uint8_t* head() const { return vhead ? vhead.get() : hdr; }
};

constexpr uint32_t kNotifyRequest = UINT32_MAX;

struct Batch {
  uint64_t id = 0;
  Transport* owner = nullptr;
  std::shared_ptr<Peer> peer;
  size_t n = 0;
  std::vector<uint64_t> lengths;
  // Per request when any request gathers rows (empty otherwise); see strided_rows.h.
  std::vector<StridedRows> gathers;
  // Per request when any request scatters its bytes into remote rows (empty otherwise).
  std::vector<StridedRows> scatters;
  std::unique_ptr<std::atomic<int32_t>[]> statuses;
  std::vector<Slice> slices;
  std::atomic<int64_t> remaining{0};
  std::atomic<int32_t> cancel_status{0};
  std::atomic<int64_t> cancel_at{0};
  std::atomic<int32_t> batch_status{0};
  std::atomic<bool> notify_sent{false};
  // A WRITE of this batch settled while bytes it had already sent may still land at the peer
  // (the peer did not confirm a cancel, or this side gave the connection up with them on their way).
  std::atomic<bool> remote_unconfirmed{false};
  bool has_notify = false;
  // Its writes are verified (capabilities.verifiedWrites; wire.h, kFlagDigest).
  bool verify = false;
  std::vector<uint8_t> notify;
  Slice notify_slice;
  std::mutex err_mu;
  std::string error;

  bool cancelled() const { return cancel_status.load(std::memory_order_acquire) != 0; }
  /** The rows slice `s` gathers its bytes from, or null for a contiguous one. */
  const StridedRows* gather_of(const Slice* s) const {
    return s->req < gathers.size() && gathers[s->req].gathers() ? &gathers[s->req] : nullptr;
  }
  /** The remote rows slice `s` lands in (a WRITE_ROWS frame), or null for a contiguous one. */
  const StridedRows* scatter_of(const Slice* s) const {
    return s->req < scatters.size() && scatters[s->req].gathers() ? &scatters[s->req] : nullptr;
  }
  /** Whether slice `s` is a verified write. */
  bool verifies(const Slice* s) const { return verify && s->op == OP_WRITE; }
  /** Where slice `s`'s bytes start within its request (its packed offset). */
  static uint64_t packed_offset(const Slice* s) { return s->remote - s->span_addr; }
  void note_error(const std::string& why);
  /** Any thread: slice `s` reached a terminal status. */
  void complete(Slice* s, int32_t status, const char* why = nullptr);
  void all_done();
};

class Lane;

struct Peer : std::enable_shared_from_this<Peer> {
  uint64_t id = 0;
  Transport* owner = nullptr;
  std::string host;
  uint16_t port = 0;
  uint64_t epoch = 0;
  std::string name;
  bool local = false;
  std::vector<Lane*> lanes;
  // STALE_DESCRIPTOR / AUTH_FAILED / PROTOCOL_MISMATCH: never retried. Lanes of one peer run on
  // different loops and may fail at once: the first failure wins, under sticky_mu.
  std::atomic<int32_t> sticky{0};
  std::atomic<bool> closed{false};
  std::atomic<uint32_t> next_lane{0};
  // openPeer in progress
  std::mutex open_mu;
  uint64_t open_id = 0;
  int open_pending = 0;
  int32_t open_status = 0;
  std::string open_msg;

  std::string label() const;
  /** Any thread: records the first permanent failure (later ones are ignored). */
  void set_sticky(int32_t status, const std::string& msg);
  /** Any thread: the permanent failure (0 if none) and its message. */
  int32_t sticky_failure(std::string* msg) const;
  void lane_opened(int32_t status, const std::string& msg);
  ~Peer();

 private:
  mutable std::mutex sticky_mu;
  std::string sticky_msg;
};

class Transport {
 public:
  Transport(Options o, EventSink sink);
  ~Transport();
  /** Binds the listener and starts the loops. */
  Status start(std::string* err);
  uint16_t port() const { return port_; }
  const Options& options() const { return opt_; }
  te::MemoryRegistry& registry() { return registry_; }
  /** Which registered regions are device memory (staged through pinned host buffers). */
  DeviceMap& devices() { return devices_; }
  /** Bytes of one staging buffer: the slice size (a slice is the most one request frame carries from here). */
  uint64_t staging_bytes() const { return opt_.slice_size > kMaxBody ? kMaxBody : opt_.slice_size; }
  /** Where blocking copies run (CUDA staging, same-process batches): never on an I/O loop. */
  WorkerPool& workers() { return workers_; }
  /** The staging buffers' backend: nullptr for CUDA. */
  StagingBackend* staging_backend() const { return staging_backend_; }
  /** Tests: stage through `b` instead of CUDA (before any device memory is used). */
  void set_staging_backend(StagingBackend* b) { staging_backend_ = b; }
  Loop* loop_for(uint32_t i) { return loops_[i % loops_.size()].get(); }
  size_t loop_count() const { return loops_.size(); }

  /** Creates a peer and connects its lanes; an OPEN event with `open_id` reports the outcome. */
  uint64_t open_peer(const std::string& host, uint16_t port, uint64_t epoch, const std::string& name, bool local,
                     uint64_t open_id);
  void close_peer(uint64_t peer_id);
  /**
   * Validates locally and starts a batch; BATCH event `*batch_id` when every request is terminal.
   * `rows`: writes whose bytes are strided rows on either side (host memory only).
   */
  Status submit(uint64_t peer_id, const uint8_t* ops, const uint64_t* local, const uint64_t* remote,
                const uint64_t* lengths, size_t n, const uint8_t* notify, size_t notify_len, uint64_t* batch_id,
                std::string* err, const BatchExtras& rows = {});
  /** Stops the batch: unsent slices fail with `status`, in-flight ones are awaited (bounded by the grace time). */
  void cancel(uint64_t batch_id, int32_t status);
  std::shared_ptr<Batch> take_batch(uint64_t id);
  /** Stops everything; pending batches fail with ABORTED. Idempotent, blocking (joins threads). */
  void close();
  bool closing() const { return closing_.load(); }

  void emit(Event e) { sink_(std::move(e)); }
  /** A warning for the engine's log (rare events only: each is one JS call). */
  void warn(const std::string& message);
  void finish_batch(Batch* b);
  /** Queues a notification for the JS thread; POOL_EXHAUSTED (nothing queued) when the queue is full. */
  Status deliver_notification(const std::string& from, std::vector<uint8_t> payload);
  /** JS thread: a notification left the queue (it is being handed to listeners). */
  void notification_taken(const std::string& from, size_t bytes);
  /** Listener: takes an accepted connection from `address` (refused past the connection caps). */
  void accept_fd(int fd, const std::string& address);
  /** Loop thread: an accepted connection from `address` closed. */
  void connection_closed(const std::string& address);
  /** Accepted, handshaked connections by their initiator's nonce (REVOKE looks them up). */
  ServedConnections& served() { return served_; }
  /** Loop threads: `bytes` of a gathered write's narrow rows were packed before their send. */
  void note_rows_packed(uint64_t bytes) { rows_packed_.fetch_add(bytes, std::memory_order_relaxed); }
  /** Bytes of gathered writes sent through a lane's packing buffer so far (describe()). */
  uint64_t rows_packed() const { return rows_packed_.load(std::memory_order_relaxed); }

 private:
  /** submit's first step: the peer looked up and a batch for it, with its requests' lengths and notification. */
  Status new_batch(uint64_t peer_id, const uint64_t* lengths, size_t n, const uint8_t* notify, size_t notify_len,
                   std::shared_ptr<Batch>* out, std::string* err);
  /** Sets each request's status from local checks; returns the lengths to plan (0 for a refused request). */
  std::vector<uint64_t> check_requests(Batch* b, const uint8_t* ops, const uint64_t* local, const uint64_t* remote,
                                       const BatchExtras& rows);
  /** check_requests for a gathered write: its rows set on the batch; a status. */
  int32_t check_gather(Batch* b, size_t i, uint64_t local, uint32_t rows, uint64_t pitch);
  /** check_requests for a scattered write: its remote rows set on the batch; a status. */
  int32_t check_scatter(Batch* b, size_t i, uint64_t remote, uint32_t rows, uint64_t pitch);
  /** Cuts the requests into slices striped over `lanes` lanes. */
  void plan_batch(Batch* b, const uint8_t* ops, const uint64_t* local, const uint64_t* remote,
                  const std::vector<uint64_t>& plan_lengths, uint32_t lanes);
  /** Hands a remote batch's slices to its peer's lanes, one enqueue per lane. */
  void queue_on_lanes(Batch* b, uint32_t lanes);
  void run_local(std::shared_ptr<Batch> b);
  /** run_local for one slice: its bytes copied, or why not. */
  int32_t copy_local(const Batch& b, const Slice& s, std::string* why);
  /** start()'s failure when the process has no descriptor left for what it opens. */
  static Status out_of_descriptors(std::string* err);
  Options opt_;
  EventSink sink_;
  te::MemoryRegistry registry_;
  DeviceMap devices_;
  StagingBackend* staging_backend_ = nullptr;
  std::vector<std::unique_ptr<Loop>> loops_;
  WorkerPool workers_{opt_.worker_threads};
  IoHandler* listener_ = nullptr;
  int listen_fd_ = -1;
  int reserve_fd_ = -1;  // the listener's reserve descriptor (listener.h)
  uint16_t port_ = 0;
  std::atomic<bool> closing_{false};
  std::atomic<uint32_t> next_accept_{0};
  std::mutex mu_;
  uint64_t next_peer_ = 1;
  uint64_t next_batch_ = 1;
  std::unordered_map<uint64_t, std::shared_ptr<Peer>> peers_;
  std::unordered_map<uint64_t, std::shared_ptr<Batch>> batches_;
  std::mutex conn_mu_;
  uint64_t connections_ = 0;
  std::unordered_map<std::string, uint64_t> connections_by_address_;
  ServedConnections served_;
  std::atomic<uint64_t> rows_packed_{0};
  te::NotifyBudget notify_budget_{opt_.notify_queue_per_peer, opt_.notify_queue_bytes};  // after opt_: reads it
};

/** Socket options shared by both sides (TCP_NODELAY, buffer sizes, congestion control). */
void tune_socket(int fd, const Options& o);

/**
 * Sets `fd`'s congestion control to `name` (TCP_CONGESTION); false, with why in `*err`, when
 * the kernel refuses it (not available, or not allowed to this process).
 */
bool set_congestion(int fd, const std::string& name, std::string* err);

/** Bytes a writev of `iov[0..n)` offers (fewer sent: the send buffer is full). */
inline uint64_t iov_bytes(const iovec* iov, size_t n) {
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) total += iov[i].iov_len;
  return total;
}

}  // namespace tetcp
