// A peer as this transport knows it: its address per rail, its region table and the
// operations posted into each region, and the requests waiting for its answers.
#pragma once

#include <condition_variable>
#include <map>
#include <set>

#include "batch.h"

namespace te::fabric {

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
  // Guards broken_reason, regions, incoming, posted, owed, table_pending, parked,
  // parked_next and hellos_left; may be taken while a rail's q_mu is held.
  std::mutex mu;
  std::string broken_reason;
  std::map<uint64_t, RemoteRegion> regions;                // by addr
  std::vector<RemoteRegion> incoming;                      // TABLE chunks being received
  std::map<uint64_t, int> posted;                          // region start -> operations posted into it
  std::multimap<uint64_t, std::shared_ptr<OwedAck>> owed;  // region start -> acks waiting for its drain
  bool table_pending = false;
  // Batches whose remote range was not in the table, waiting for the answer to the table
  // request in flight, which was sent after they were submitted.
  std::vector<std::shared_ptr<Batch>> parked;
  // Batches that missed while a request sent before them was in flight: its answer may
  // predate the registration they need, so they wait for a request sent after it.
  std::vector<std::shared_ptr<Batch>> parked_next;
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
  std::mutex mu;  // guards `waiting` (cv waits on it)
  std::condition_variable cv;
  std::set<std::vector<uint8_t>> waiting;  // rail-0 addresses of peers that did not answer yet
};

/** A peer's region table holds at most this many regions (a longer answer is refused). */
constexpr size_t kMaxTableRegions = 1 << 20;

/** Peers remembered for revocation: at most this many, the least recently heard-from dropped. */
constexpr size_t kMaxKnownPeers = 4096;

}  // namespace te::fabric
