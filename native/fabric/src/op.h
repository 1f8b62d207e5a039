// An operation posted to a rail's endpoint (a data RMA, a control send or receive): the
// provider's context and what its completion reports to.
#pragma once

#include "batch.h"

namespace te::fabric {

struct Peer;

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

}  // namespace te::fabric
