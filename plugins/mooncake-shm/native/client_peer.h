// The initiator's state of one target connection, shared by client.cpp and
// client_connection.cpp (private to the client).
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_set>
#include <vector>

#include "client.h"
#include "token_slots.h"

namespace teshm {

struct Client::Peer {
  enum State { CONNECTING, HELLO_SENT, OPEN, REVOKING, FAILED } state = CONNECTING;
  uint64_t id = 0;
  std::string socket_name, segment;
  uint64_t epoch = 0;
  int fd = -1;
  int ctl_fd = -1;
  ControlPage* page = nullptr;
  int pidfd = -1;
  int64_t open_deadline = 0;
  bool open_reported = false;
  bool closed_by_user = false;
  int32_t failure = 0;
  std::string failure_msg;
  int32_t revoke_status = 0;
  std::string revoke_msg;
  uint32_t window = 0;
  std::deque<Pending> unsent;
  // Sent and not answered yet; a request's sequence number on the wire is its token here,
  // given when it is sent.
  TokenSlots<Pending> inflight;
  bool want_out = false;
  // flush_locked()'s encoding buffers, kept so that sending a message allocates nothing.
  std::vector<uint8_t> out_msg;
  std::vector<Request> out_reqs;
  std::vector<uint64_t> out_tokens;
  std::unordered_set<uint32_t> announced;  // pools this connection's target was sent (POOL)
  uint8_t nonce[16] = {};                  // the target reads it from this process to prove it may (HELLO probe)

  std::string label() const { return "segment \"" + segment + "\" (@" + socket_name + ")"; }
};

}  // namespace teshm
