// A batch of transfers as the rails carry it: the batch with its per-request outcomes
// (settled as slices complete) and the slices it is cut into.
#pragma once

#include "common.h"

namespace te::fabric {

struct Peer;

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
  // Guards `error` (the first failure message; set from any rail thread).
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

}  // namespace te::fabric
