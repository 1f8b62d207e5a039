// One rail: a libfabric endpoint on one NIC with its queues of slices and control messages,
// its address-vector cache and the thread that posts and polls for it.
#pragma once

#include <set>

#include "address_cache.h"
#include "answer_bound.h"
#include "batch.h"
#include "ctrl_msg.h"
#include "op.h"
#include "write_fences.h"

namespace te::fabric {

struct Peer;

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
  // The CQ's wait object when it is an fd (FI_GETWAIT), else -1: an idle rail sleeps on it.
  int wait_fd = -1;
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
  std::atomic<uint64_t> rma_ops{0}, rma_slices{0};     // posted, for rails() (tests and tuning)
  std::atomic<uint64_t> rma_delivery_complete_ops{0};  // posted with FI_DELIVERY_COMPLETE (rails())
  std::atomic<uint64_t> waits{0}, waits_with_data{0};  // sleeps on the CQ, and those that moved data (rails())
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

  // Guards the queues (slices, ctrl) with their answer counts, inflight, free_send and live;
  // submitters queue under it, the rail thread takes it briefly around each post and poll.
  std::mutex q_mu;
  std::deque<Slice> slices;
  std::deque<CtrlMsg> ctrl;
  // Peerless messages (answers to whoever asked) in `ctrl`, counted and bounded.
  static constexpr size_t kMaxAnswers = AnswerBound::kMaxAnswers;
  AnswerBound answers;
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

  // Guards the address-vector cache (addresses): the rail thread and any caller resolving an
  // address. Never held while peers_mu is taken (see address_of).
  std::mutex av_mu;
  // Raw address -> AV entry. Any well-formed sender inserts one (to answer it), so beyond
  // addresses.max_entries the least recently used entries that no peer opened here sends to
  // are evicted (and retired from the AV like forgotten ones). Removing an address from the
  // AV while an operation or a queued message still uses it makes the provider touch freed
  // state (ofi_rxm crashed in fi_send), so the rail thread removes one only once nothing
  // refers to it.
  AddressCache addresses;
  std::atomic<bool> has_retiring{false};
  int64_t last_retire_scan = 0;

  std::thread thread;
  std::atomic<bool> stop{false};

  Status open(std::string* err);
  void start_thread();
  void wake();
  /** The address's AV entry, inserted if new; FI_ADDR_NOTAVAIL for an address the provider refuses or that does not fit
   * it. */
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
  void debug_line();  // TE_FABRIC_DEBUG: the rail's queues, once a second
  void find_wait_fd();
  int idle_wait_ms();
  bool sleep_on_wait_fd();
  bool sleep_in_sread();
  bool nap_if_out_of_descriptors();
  bool post_some();
  bool post_ctrl();
  void drop_ctrl(CtrlMsg&& m, const std::string& why);
  /** Posts `chunk`'s slices; `merged` counts the window places freed by carrying several slices in one op. */
  bool post_chunk(std::deque<Slice>& chunk, std::vector<Op*>& posted, int& merged, size_t max_ops);
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
  /** Whether a queued slice may still be posted: on OK it is counted into its region and `lease` holds its local
   * memory. */
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

}  // namespace te::fabric
