// mooncake-shm transport core (no N-API here). One Transport is both a target and an
// initiator:
//   - as a target (server.cpp) it listens on an abstract unix socket, admits only
//     connections whose SO_PEERCRED uid is its own, and runs the copies itself with
//     process_vm_readv/writev on copy threads, after checking every target range against
//     its own registry (so a peer reaches nothing this process did not register);
//   - as an initiator (client.cpp) it checks its local ranges against the same registry,
//     sends requests, and settles a batch only when the target answered for every request,
//     or when the connection's control page fence guarantees the target copies nothing more.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "control_page.h"
#include "pools.h"
#include "te/memory_registry.h"
#include "te/notify_budget.h"
#include "te/status.h"
#include "te/transport_event.h"
#include "wire.h"

namespace teshm {

using te::Status;

struct Options {
  std::string segment_name;
  uint64_t epoch = 0;
  std::string socket_name;           // abstract name to listen on (no leading NUL)
  uint32_t copy_threads = 2;         // target-side threads running process_vm_*
  uint64_t chunk_bytes = 256 << 10;  // a request is copied in chunks of this size, spread over the threads
  uint32_t max_outstanding = 4096;   // requests one initiator may have in flight at this target
  uint32_t max_connections = 1024;
  // An accepted connection that has not completed HELLO within this is closed (a same-uid
  // process that connects and stays silent would otherwise hold a slot forever).
  int handshake_timeout_ms = 5000;
  int connect_timeout_ms = 5000;
  int cancel_grace_ms = 250;
  uint64_t notify_queue_per_peer = 1024;
  uint64_t notify_queue_bytes = 64ull << 20;
  // Copy, server and client threads run under SCHED_BATCH (te/thread_policy.h): woken, they
  // do not preempt the JS thread.
  bool batch_scheduling = true;
};

/** Something for the JS thread (the event type every transport core shares). */
using Event = te::TransportEvent;
using EventSink = te::TransportEventSink;

class Server;
class Client;

/** Target-side counters, for tests and diagnostics (any thread). */
struct ServerStats {
  uint64_t pending_peak = 0;         // the most completions ever waiting on one connection's socket
  uint64_t read_pauses = 0;          // times a connection's messages stopped being read (back-pressure)
  uint64_t pool_chunks = 0;          // chunks copied with memcpy through a mapped pool of the initiator
  uint64_t process_vm_chunks = 0;    // chunks copied with process_vm_readv/writev
  uint64_t pools_mapped = 0;         // initiators' pools mapped in this process now
  uint64_t completion_messages = 0;  // COMPLETIONS messages sent to initiators (each answers one or more requests)
  uint64_t work_allocations = 0;     // per-request records allocated (finished ones are reused)
};

/** An initiator's batch: per-request statuses, leases on its local ranges, cancel state. */
struct Batch {
  uint64_t id = 0;
  uint64_t peer = 0;
  size_t n = 0;
  std::vector<uint64_t> lengths;
  std::unique_ptr<std::atomic<int32_t>[]> statuses;
  std::vector<te::Lease> leases;  // one per request, released when the request is terminal
  size_t remaining = 0;           // requests (and the notification) not yet terminal; under the client's lock
  int32_t cancel_status = 0;
  int64_t cancel_deadline = 0;
  int32_t batch_status = 0;
  bool has_notify = false;
  bool notify_queued = false;
  std::vector<uint8_t> notify;
  std::string error;
};

class Transport {
 public:
  Transport(Options o, EventSink sink);
  ~Transport();
  /** Listens and starts the threads. */
  Status start(std::string* err);
  const Options& options() const { return opt_; }
  te::MemoryRegistry& registry() { return registry_; }
  ServerStats server_stats() const;

  /** Starts connecting to the target listening on `socket_name`; an OPEN event `open_id` reports. */
  uint64_t open_peer(const std::string& socket_name, uint64_t epoch, const std::string& name);
  void close_peer(uint64_t peer);
  /** Checks local ranges and starts a batch; a BATCH event `*batch_id` reports when every request is terminal. */
  Status submit(uint64_t peer, const uint8_t* ops, const uint64_t* local, const uint64_t* remote,
                const uint64_t* lengths, size_t n, const uint8_t* notify, size_t notify_len, uint64_t* batch_id,
                std::string* err);
  /** Stops a batch with `status` (TIMEOUT, ABORTED); settles once the target copies nothing more for it. */
  void cancel(uint64_t batch, int32_t status);
  std::shared_ptr<Batch> take_batch(uint64_t id);
  /** Pool memory (see pools.h): the caller holds the returned pool; its JS view holds another. */
  Status allocate_pool(uint64_t len, std::shared_ptr<LocalPool>* out, std::string* err);
  /** Frees the pool starting at `base` (unregistered first); targets drop their mappings. */
  Status free_pool(uint64_t base, std::string* err);
  /** Stops both sides; pending batches fail with ABORTED. Blocking and idempotent. */
  void close();

  void emit(Event e) { sink_(std::move(e)); }
  /** JS thread: a notification left the queue. */
  void notification_taken(const std::string& from, size_t bytes);
  /** Target side: queues a notification for the JS thread, or POOL_EXHAUSTED when the queue is full. */
  Status deliver_notification(const std::string& from, std::vector<uint8_t> payload);

 private:
  Options opt_;
  EventSink sink_;
  te::MemoryRegistry registry_;
  LocalPools pools_;  // before client_: the client reads it until it is destroyed
  std::unique_ptr<Server> server_;
  std::unique_ptr<Client> client_;
  std::atomic<bool> closed_{false};
  te::NotifyBudget notify_budget_{opt_.notify_queue_per_peer, opt_.notify_queue_bytes};  // after opt_: reads it
};

}  // namespace teshm
