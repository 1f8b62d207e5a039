// Internal state of te::fabric::Transport (libfabric builds only).
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <list>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "te/fabric/transport.h"
#include "te/hex.h"
#include "te/memory_registry.h"
#include "te/notify_budget.h"
#include "wire.h"
#include "write_fences.h"

namespace te::fabric {

/** TE_FABRIC_DEBUG set: diagnostics on stderr. Read once per process, not per message. */
inline bool fabric_debug() {
  static const bool on = std::getenv("TE_FABRIC_DEBUG") != nullptr;
  return on;
}

/** A string made safe to embed in the JSON texts of health checks. */
inline std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\', o += c;
    else if (static_cast<unsigned char>(c) < 0x20) o += ' ';
    else o += c;
  }
  return o;
}

inline int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Peer;
struct Rail;

struct Batch {
  uint64_t id = 0;
  std::shared_ptr<Peer> peer;
  size_t n = 0;
  std::vector<uint8_t> ops;
  std::vector<uint64_t> local, remote, lengths;
  std::unique_ptr<std::atomic<int32_t>[]> statuses;
  std::unique_ptr<std::atomic<uint32_t>[]> req_left;  // slices of request i not yet terminal
  std::atomic<int64_t> slices_left{0};
  std::atomic<int32_t> cancel_status{0};
  std::atomic<int32_t> batch_status{0};
  std::atomic<bool> done{false};
  // Set once its slices were handed to the rails; a batch cancelled before that (parked
  // for a table query) moved nothing, whatever its per-request statuses say.
  std::atomic<bool> dispatched{false};
  // A posted write was abandoned when the endpoints closed: its bytes may still reach the peer.
  std::atomic<bool> remote_unconfirmed{false};
  std::vector<uint8_t> notify;
  bool has_notify = false;
  // The request id of its NOTIFY once sent (guarded by pending_mu): the batch settles with
  // the receiver's NOTIFY_ACK, or fails at its deadline, on peer loss or when cancelled.
  uint64_t notify_req = 0;
  std::mutex err_mu;
  std::string error;
  void fail_message(const std::string& m) {
    std::lock_guard<std::mutex> l(err_mu);
    if (error.empty()) error = m;
  }
};

struct Slice {
  std::shared_ptr<Batch> batch;
  uint32_t req = 0;
  uint64_t region = 0;  // start of the peer's region it targets (revocation drains by region)
  uint64_t local = 0, len = 0, raddr = 0, key = 0;
  bool write = true;
  bool fence = false;  // the batch's last write on its rail (see write_fences.h)
};

struct CtrlMsg {
  std::shared_ptr<Peer> peer;  // a peer this transport opened: sent to its `dest`, never once it broke
  fi_addr_t dest = FI_ADDR_UNSPEC;
  // Peerless messages (answers, revocations) name the raw address instead: the rail thread
  // resolves it when it sends, so an address forgotten meanwhile is never used.
  std::vector<uint8_t> to;
  bool tried = false;  // the provider said "again" once: a forgotten address is not looked up anew
  std::vector<uint8_t> bytes;
  std::shared_ptr<Batch> batch;  // NOTIFY: completes this batch
  int64_t deadline = 0;
};

// One slice carried by a data op: the request it belongs to, the peer region it targets
// (counted there while the op is out) and the lease on its local memory.
struct OpPart {
  uint32_t req = 0;
  uint64_t len = 0;
  uint64_t region = 0;
  Lease lease;
};

struct Op {
  fi_context2 ctx;  // first: providers with FI_CONTEXT/FI_CONTEXT2 use it
  enum Kind : uint8_t { DATA, SEND, RECV } kind = DATA;
  int slot = -1;
  fi_addr_t dest = FI_ADDR_UNSPEC;  // SEND and DATA: the address it went to (kept in the AV until it finished)
  std::shared_ptr<Batch> batch;
  std::shared_ptr<Peer> peer;
  // A DATA op carries up to kMaxParts slices of one batch to one peer region, posted as one
  // scatter-gather RMA where the provider takes several iovs: its outcome is theirs.
  static constexpr int kMaxParts = 4;
  int nparts = 0;
  OpPart parts[kMaxParts];
  bool write = false;        // DATA: an RMA write (else a read)
  bool plain_write = false;  // posted without delivery completion: held for its fence
  bool fence = false;        // its delivery proves the batch's plain writes on this rail
};

struct Rail {
  Transport::Impl* owner = nullptr;
  int index = 0;
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_ep* ep = nullptr;
  fid_cq* cq = nullptr;
  fid_av* av = nullptr;
  RailInfo pub;
  bool mr_local = false, mr_endpoint = false, prov_key = false;
  bool can_wait = true;
  // Writes ask for FI_DELIVERY_COMPLETE (the transport's option), fixed at open for the rail's
  // life: a post error fails that write (and its peer when the connection is gone), never
  // the guarantee of later writes to every peer.
  bool delivery_complete = true;
  // The provider places writes to a peer in posted order (FI_ORDER_WAW) up to this size:
  // one delivery-complete write per batch proves the others (write_fences.h).
  bool ordered_writes = false;
  uint64_t max_order_waw = 0;
  WriteFences fences;
  int window = 64;
  // Slices one op may carry: the provider's local and remote iov limits (1 on verbs).
  int max_parts = 1;
  std::atomic<uint64_t> rma_ops{0}, rma_slices{0};  // posted, for rails() (tests and tuning)
  std::atomic<uint64_t> rma_delivery_complete_ops{0};  // posted with FI_DELIVERY_COMPLETE (rails())
  // Fault injection for tests: the next `injected_post_errors` RMA posts fail with
  // -injected_post_errno instead of reaching the provider (a relaxed load when unused).
  std::atomic<int> injected_post_errors{0};
  int injected_post_errno = 0;
  ssize_t injected_post_error() {
    if (injected_post_errors.load(std::memory_order_relaxed) <= 0) return 0;
    return injected_post_errors.fetch_sub(1) > 0 ? -static_cast<ssize_t>(injected_post_errno) : 0;
  }

  // Control buffers (registered: FI_MR_LOCAL providers need descriptors for sends too).
  static constexpr int kRecvSlots = 16, kSendSlots = 16;
  std::vector<uint8_t> recv_buf, send_buf;
  fid_mr* recv_mr = nullptr;
  fid_mr* send_mr = nullptr;
  std::vector<int> free_send;

  std::mutex q_mu;
  std::deque<Slice> slices;
  std::deque<CtrlMsg> ctrl;
  // Peerless messages (answers to whoever asked) in `ctrl`: a peer's requests decide how many
  // there are, so they are bounded; beyond the bound an answer is not queued (the asker
  // times out and asks again). Guarded by q_mu.
  static constexpr size_t kMaxAnswers = 4096;
  static constexpr size_t kMaxAnswerBytes = 64u << 20;
  size_t answers = 0, answer_bytes = 0;
  /** Removes ctrl[i] (q_mu held), keeping the answer counts. */
  CtrlMsg take_ctrl(size_t i);
  std::atomic<bool> sleeping{false};
  int inflight = 0;
  // Queue lengths and all work (queued + in flight), written under q_mu and read without it,
  // so the rail thread's spin checks do not take the lock submitters queue under.
  std::atomic<int64_t> queued_slices{0}, queued_ctrl{0}, pending_work{0};
  void count_work() {
    queued_slices.store(static_cast<int64_t>(slices.size()));
    queued_ctrl.store(static_cast<int64_t>(ctrl.size()));
    pending_work.store(static_cast<int64_t>(slices.size() + ctrl.size()) + inflight);
  }
  std::unordered_set<Op*> live;  // every posted op (freed at close)

  std::mutex av_mu;
  // Raw address -> AV entry. Any well-formed sender inserts one (to answer it), so beyond
  // max_av_entries the least recently used entries that no peer opened here sends to are
  // evicted (and retired from the AV like forgotten ones).
  struct AvEntry {
    fi_addr_t fa = FI_ADDR_NOTAVAIL;
    std::list<std::vector<uint8_t>>::iterator lru;
  };
  std::map<std::vector<uint8_t>, AvEntry> av_map;
  std::list<std::vector<uint8_t>> av_lru;  // av_map's keys, most recently used first
  static constexpr size_t kMaxAvEntries = 4096;
  size_t max_av_entries = kMaxAvEntries;  // (tests lower it)
  /** av_mu held: evicts least recently used entries beyond max_av_entries, sparing `keep` and `pinned`. */
  void evict_addresses(fi_addr_t keep, const std::set<fi_addr_t>& pinned);
  // Forgotten addresses -> since when. Removing an address from the AV while an operation
  // or a queued message still uses it makes the provider touch freed state (ofi_rxm
  // crashed in fi_send), so the rail thread removes one only once nothing refers to it.
  std::map<fi_addr_t, int64_t> retiring;
  std::atomic<bool> has_retiring{false};
  int64_t last_retire_scan = 0;
  /** Time a forgotten address stays in the AV at least: covers a caller between resolving an address and using it. */
  static constexpr int64_t kRetireGraceMs = 2000;

  std::thread thread;
  std::atomic<bool> stop{false};

  Status open(std::string* err);
  void start_thread();
  void wake();
  /** The address's AV entry, inserted if new; FI_ADDR_NOTAVAIL for an address the provider refuses or that does not fit it. */
  fi_addr_t address_of(const std::vector<uint8_t>& raw, std::string* err);
  /** Whether `raw` has this provider's address length (and socket family): only such addresses reach fi_av_insert. */
  bool address_fits(const std::vector<uint8_t>& raw) const;
  /** The address's AV entry if it has one (no insert), else FI_ADDR_NOTAVAIL. */
  fi_addr_t lookup_address(const std::vector<uint8_t>& raw);
  /** Drops the address's mapping; its AV entry is removed later by retire_addresses. */
  void forget_address(const std::vector<uint8_t>& raw);
  /** Rail thread: removes forgotten addresses that no message, operation or open peer uses. */
  void retire_addresses();
  void push_slices(std::vector<Slice>&& s);
  /** Queues a control message; false (dropped: answers carry no batch) for an answer beyond the bound. */
  bool push_ctrl(CtrlMsg&& m);
  void run();
  bool post_some();
  bool post_ctrl();
  void drop_ctrl(CtrlMsg&& m, const std::string& why);
  /** Posts `chunk`'s slices; `merged` counts the window places freed by carrying several slices in one op. */
  bool post_chunk(std::deque<Slice>& chunk, std::vector<Op*>& posted, int& merged);
  // The slices one RMA operation carries, as the provider takes them.
  struct Group {
    iovec iov[Op::kMaxParts];
    void* desc[Op::kMaxParts];
    fi_rma_iov riov[Op::kMaxParts];
    uint64_t total = 0;
    bool fence = false;
  };
  size_t gather_group(std::deque<Slice>& chunk, Op* op, uint64_t region, uint64_t key, Group& g);
  void fail_group(std::deque<Slice>& chunk, size_t n, const std::shared_ptr<Peer>& peer, int rc, bool write,
                  bool delivery_complete_flag);
  void give_back_place();
  /** Whether a queued slice may still be posted: on OK it is counted into its region and `lease` holds its local memory. */
  int32_t admit(const Slice& s, Lease& lease, std::string& why);
  /** Slices taken from the queue at a time to be posted without the queue lock. */
  static constexpr size_t kPostChunk = 32;
  bool poll_cq(int timeout_ms);
  void handle_error();
  void repost_recv(Op* op);
  /** Reports a data op's outcome (deletes it, releasing its lease) and counts it out of its region. */
  void finish_op(Op* op, int32_t status, const std::string& why);
  /** A data op the provider finished (locally): holds a plain write for its fence, reports the rest. */
  void data_finished(Op* op, int32_t status, const std::string& why);
  /** A fence that will not be posted: the writes held for it are reported with `status`. */
  void fence_dropped(const Slice& s, int32_t status, const std::string& why);
  void shutdown();
  void* desc_of(fid_mr* mr) const { return mr_local && mr ? fi_mr_desc(mr) : nullptr; }
};

struct MrEntry {
  uint64_t addr = 0, len = 0;
  std::vector<fid_mr*> mrs;  // per rail
};

struct Published {
  uint64_t len = 0, base = 0;
  std::vector<uint64_t> keys;
};

/** A REVOKE_ACK owed to a peer once every operation posted into the revoked region finished. */
struct OwedAck {
  int rail = 0;
  std::vector<uint8_t> to;  // the revoking peer's raw address on that rail
  uint64_t req = 0, epoch = 0;
  std::atomic<int> left{1};
};

struct Peer {
  uint64_t id = 0;
  std::string name;
  uint64_t epoch = 0;
  bool same_process = false;
  PeerAddress address;
  std::vector<fi_addr_t> dest;  // per local rail
  std::vector<int> peer_rail;   // per local rail: which peer rail it talks to
  std::atomic<int> state{0};    // 0 opening, 1 ready, 2 broken, 3 closed
  std::mutex mu;
  std::string broken_reason;
  std::map<uint64_t, RemoteRegion> regions;  // by addr
  std::vector<RemoteRegion> incoming;        // TABLE chunks being received
  std::map<uint64_t, int> posted;            // region start -> operations posted into it
  std::multimap<uint64_t, std::shared_ptr<OwedAck>> owed;  // region start -> acks waiting for its drain
  bool table_pending = false;
  std::vector<std::shared_ptr<Batch>> parked;
  int hellos_left = 0;
  std::atomic<bool> open_reported{false};
  std::atomic<uint64_t> rr{0};  // rail round robin
};

struct Pending {
  enum Kind { HELLO, TABLE, CHECK, NOTIFY } kind = HELLO;
  std::shared_ptr<Peer> peer;
  std::shared_ptr<Batch> batch;  // NOTIFY: the batch its acknowledgement settles
  int rail = 0;
  int64_t sent = 0, deadline = 0;
  uint64_t check_id = 0;
};

struct CheckState {
  std::shared_ptr<Peer> peer;
  int left = 0;
  std::vector<std::string> rails;  // JSON per rail
  bool ok = true;
};

/** An unregistration waiting until every known peer dropped the region and drained it. */
struct RevokeWait {
  std::mutex mu;
  std::condition_variable cv;
  std::set<std::vector<uint8_t>> waiting;  // rail-0 addresses of peers that did not answer yet
};

/** A peer's region table holds at most this many regions (a longer answer is refused). */
constexpr size_t kMaxTableRegions = 1 << 20;

/** Peers remembered for revocation: at most this many, the least recently heard-from dropped. */
constexpr size_t kMaxKnownPeers = 4096;

struct Transport::Impl {
  explicit Impl(Options o) : opt(std::move(o)), notify_budget(opt.notify_queue_per_peer, opt.notify_queue_bytes) {}

  Options opt;
  std::function<void(Event)> sink;
  std::vector<std::unique_ptr<Rail>> rails;
  MemoryRegistry registry;
  std::shared_mutex mr_mu;
  std::map<uint64_t, MrEntry> mrs;
  std::mutex pub_mu;
  std::map<uint64_t, Published> published;
  // The plugin's arena (opt.arena_*), registered once for local access only (descriptors
  // for FI_MR_LOCAL providers). Remote access to arena memory goes through a registration
  // per region, so unregistering a region revokes its key even though the arena stays registered.
  std::vector<fid_mr*> arena_mrs;
  bool in_arena(uint64_t addr, uint64_t len) const {
    return opt.arena_size && addr >= opt.arena_base && len <= opt.arena_size && addr - opt.arena_base <= opt.arena_size - len;
  }

  std::mutex peers_mu;
  std::unordered_map<uint64_t, std::shared_ptr<Peer>> peers;
  uint64_t next_peer = 1;
  std::mutex known_mu;
  // Rail-0 addresses of peers that said hello -> when they last did. Bounded, and a peer
  // that does not answer a revocation is forgotten (it says hello again when it comes back).
  std::map<std::vector<uint8_t>, int64_t> known;

  std::mutex batches_mu;
  std::unordered_map<uint64_t, std::shared_ptr<Batch>> batches;
  std::unordered_map<uint64_t, std::unique_ptr<BatchOutcome>> outcomes;
  std::atomic<uint64_t> next_batch{1};

  std::mutex pending_mu;
  std::unordered_map<uint64_t, Pending> pending;
  std::unordered_map<uint64_t, CheckState> checks;
  std::atomic<uint64_t> next_req{1};
  std::unordered_map<uint64_t, std::shared_ptr<RevokeWait>> revokes;  // guarded by pending_mu
  bool started = false;
  std::atomic<bool> closed{false};
  // Notifications handed to the sink and not yet taken (notification_taken): per sender
  // name and in bytes, bounded by opt.notify_queue_per_peer / notify_queue_bytes.
  NotifyBudget notify_budget;
  /** Emits a NOTIFY event within the budget; POOL_EXHAUSTED (nothing emitted) beyond it. */
  Status deliver_notification(const std::string& from, std::vector<uint8_t> payload);
  void notification_taken(const std::string& from, size_t bytes);
  // Same-process copies (local_copy.cpp).
  std::mutex copy_mu;
  std::condition_variable copy_cv;
  std::deque<std::shared_ptr<Batch>> copy_queue;
  std::thread copy_thread;
  bool copy_stop = false;
  void copy_locally(std::shared_ptr<Batch> b);
  void run_local_copies();
  void stop_local_copies();

  // Registrations run on worker threads: close() takes this exclusively, so it never closes
  // a domain under a registration in progress.
  std::shared_mutex life_mu;

  // Called on rail threads.
  void on_message(Rail& r, const uint8_t* data, size_t len);
  // One handler per control message type (messages.cpp), called by on_message.
  void on_hello(Rail& r, const wire::Header& h, wire::Reader& rd);
  void on_hello_ack(Rail& r, const wire::Header& h, wire::Reader& rd);
  void on_table_request(Rail& r, const wire::Header& h, wire::Reader& rd);
  void on_table(Rail& r, const wire::Header& h, wire::Reader& rd);
  void on_revoke(Rail& r, const wire::Header& h, wire::Reader& rd);
  void on_revoke_ack(Rail& r, const wire::Header& h, wire::Reader& rd);
  void on_notify(Rail& r, const wire::Header& h, wire::Reader& rd);
  void on_notify_ack(Rail& r, const wire::Header& h, wire::Reader& rd);
  void finish_slice(const std::shared_ptr<Batch>& b, uint32_t req, int32_t status, const std::string& msg);
  void data_done(const std::shared_ptr<Batch>& b);
  void complete(const std::shared_ptr<Batch>& b);
  void peer_broken(const std::shared_ptr<Peer>& p, const std::string& why);
  void housekeeping();
  void dispatch(const std::shared_ptr<Batch>& b, bool allow_refresh);
  /** Queues a message to a peer this transport opened (sent to its address on that rail). */
  void send_ctrl(int rail, const std::shared_ptr<Peer>& peer, wire::Header h, const std::vector<uint8_t>& body,
                 std::shared_ptr<Batch> batch = nullptr);
  /** Queues a message to a raw address (answers and revocations to peers not opened here). */
  void send_ctrl_to(int rail, const std::vector<uint8_t>& to, wire::Header h, const std::vector<uint8_t>& body);
  /** The AV entries on `rail` that peers opened here and not broken send to (they must stay). */
  std::set<fi_addr_t> addresses_in_use(int rail);
  void request_table(const std::shared_ptr<Peer>& p);
  void fail_pending(uint64_t req, Pending& pd, int32_t status, const std::string& why);
  void fail_hellos(const std::shared_ptr<Peer>& p, int32_t status, const std::string& why);
  /** Fails the batches of `p` that wait for a NOTIFY_ACK (the peer broke or was closed). */
  void fail_notifies(const std::shared_ptr<Peer>& p, int32_t status, const std::string& why);
  /** The notification of `b` will get no acknowledgement: its wait ends and the batch fails with `status`. */
  void notify_failed(const std::shared_ptr<Batch>& b, int32_t status, const std::string& why);
  /** The time a batch waits for its NOTIFY_ACK: the time its NOTIFY may wait to be sent, and as long again. */
  int64_t notify_ack_ms() const { return 2 * static_cast<int64_t>(std::max(opt.connect_timeout_ms, 1000)); }
  void* local_desc(int rail, uint64_t addr);
  /** Registers [addr, addr+len) on every rail with random keys; on failure nothing stays registered. */
  Status register_on_rails(uint64_t addr, uint64_t len, uint64_t access, std::vector<fid_mr*>* mrs, std::string* err);
  wire::Header header(int rail, uint8_t type, uint64_t target_epoch) const;
  void remember_peer(const std::vector<uint8_t>& addr);
  void revoke(uint64_t addr);
  /** A posted operation into `region` of `p` finished: sends the acks that waited for its drain. */
  void drained(const std::shared_ptr<Peer>& p, uint64_t region);
  void send_owed(const std::shared_ptr<OwedAck>& a);
};

/** The te status of a failed completion's error (fi_cq_err_entry::err). */
int32_t status_of_cq_error(int err);
/** The te status of an operation the provider refused to post (its return value, not -FI_EAGAIN). */
int32_t status_of_post_error(int err);

}  // namespace te::fabric
