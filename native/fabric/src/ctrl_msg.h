// A control message queued on a rail (HELLO, TABLE, NOTIFY, REVOKE and their answers).
#pragma once

#include "batch.h"

namespace te::fabric {

struct Peer;

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

}  // namespace te::fabric
