// Internal state of te::fabric::Transport (libfabric builds only). The types it is made of
// have a header each: common.h (libfabric, diagnostics, clock), batch.h (batches and
// slices), ctrl_msg.h (queued control messages), op.h (posted operations), rail.h (one
// rail), peer.h (peers and the requests waiting for them).
// Where two locks are held together: a rail's q_mu is held while a Peer::mu is taken (a
// queued control message's peer is checked before it is posted).
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <unordered_map>

#include "batch.h"
#include "common.h"
#include "ctrl_msg.h"
#include "op.h"
#include "peer.h"
#include "rail.h"
#include "te/notify_budget.h"

namespace te::fabric {

struct MrEntry {
  uint64_t addr = 0, len = 0;
  std::vector<fid_mr*> mrs;  // per rail
};

struct Published {
  uint64_t len = 0, base = 0;
  std::vector<uint64_t> keys;
};

struct Transport::Impl {
  explicit Impl(Options o) : opt(std::move(o)), notify_budget(opt.notify_queue_per_peer, opt.notify_queue_bytes) {}

  Options opt;
  std::function<void(Event)> sink;
  // Set while a rail finds the process out of descriptors (nap_if_out_of_descriptors), so
  // an episode is logged once for all rails.
  std::atomic<bool> out_of_descriptors{false};
  std::vector<std::unique_ptr<Rail>> rails;
  MemoryRegistry registry;
  // Guards mrs (shared for lookups of local descriptors, exclusive to add or remove).
  std::shared_mutex mr_mu;
  std::map<uint64_t, MrEntry> mrs;
  // Guards published (the regions and keys peers may be told of).
  std::mutex pub_mu;
  std::map<uint64_t, Published> published;
  // The plugin's arena (opt.arena_*), registered once for local access only (descriptors
  // for FI_MR_LOCAL providers). Remote access to arena memory goes through a registration
  // per region, so unregistering a region revokes its key even though the arena stays registered.
  std::vector<fid_mr*> arena_mrs;
  bool in_arena(uint64_t addr, uint64_t len) const {
    return opt.arena_size && addr >= opt.arena_base && len <= opt.arena_size &&
           addr - opt.arena_base <= opt.arena_size - len;
  }

  // Guards peers and next_peer.
  std::mutex peers_mu;
  std::unordered_map<uint64_t, std::shared_ptr<Peer>> peers;
  uint64_t next_peer = 1;
  // Guards known.
  std::mutex known_mu;
  // Rail-0 addresses of peers that said hello -> when they last did. Bounded, and a peer
  // that does not answer a revocation is forgotten (it says hello again when it comes back).
  std::map<std::vector<uint8_t>, int64_t> known;

  // Guards batches and outcomes.
  std::mutex batches_mu;
  std::unordered_map<uint64_t, std::shared_ptr<Batch>> batches;
  std::unordered_map<uint64_t, std::unique_ptr<BatchOutcome>> outcomes;
  std::atomic<uint64_t> next_batch{1};

  // Guards pending, checks, revokes and each Batch::notify_req.
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
  // Guards copy_queue and copy_stop (copy_cv waits on it).
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
  /**
   * Adds a request that waits for an answer (caller holds pending_mu). Rail 0 checks their
   * deadlines (housekeeping) and sleeps long only while there are none, so it is woken here.
   */
  void track_pending(uint64_t req, const Pending& pd);
  /** Whether any request waits for an answer: rail 0 then wakes often enough to time it out. */
  bool has_pending();
  /**
   * Validates and posts `b`. A remote range missing from the peer's table parks the batch
   * for a fresh table when `allow_refresh` (else it fails MEMORY_NOT_REGISTERED); it joins a
   * table request already in flight only when `may_join` says that request was sent after
   * the batch was submitted (an older one's answer may predate the batch's region).
   */
  void dispatch(const std::shared_ptr<Batch>& b, bool allow_refresh, bool may_join = false);
  /**
   * A peer's table request was answered (or given up): the batches that waited for it are
   * dispatched without another refresh; those that waited for a later one may ask again.
   */
  void table_settled(std::vector<std::shared_ptr<Batch>> parked, std::vector<std::shared_ptr<Batch>> parked_next);
  /** Why a request `pd` expired, for its failure. */
  std::string no_answer(const Pending& pd) const;
  /**
   * Cuts request `i` of `b` (valid, in region `r` of its peer) into slices round-robin over
   * the rails (`per_rail`); returns how many. Under the peer's lock.
   */
  uint32_t stripe_request(const std::shared_ptr<Batch>& b, size_t i, const RemoteRegion& r,
                          std::vector<std::vector<Slice>>* per_rail);
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

}  // namespace te::fabric
