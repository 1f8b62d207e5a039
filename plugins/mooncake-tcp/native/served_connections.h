// The target's accepted connections that finished their handshake, by the HELLO nonce their
// initiator chose: what a REVOKE names (see wire.h). A connection adds itself when it becomes
// ready and removes itself when it closes, on its loop thread; a REVOKE looks it up from the
// loop of the connection that carried it. Bounded by the connection caps.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "loop.h"
#include "wire.h"

namespace tetcp {

class ServerConn;

/**
 * A connection's copy of received bytes into device memory, which runs on a worker and may
 * outlive the connection (closed while the copy runs). Touched on the connection's loop only.
 */
struct ReceiveCopies {
  bool running = false;
  std::vector<std::function<void()>> waiters;  // run once the running copy is done
};

struct ServedConnection {
  ServerConn* conn = nullptr;  // touched only on `loop`, and only while `alive` holds
  Loop* loop = nullptr;
  std::weak_ptr<bool> alive;  // expires when the connection is destroyed (on its loop)
  std::string peer;           // the initiator's name from its HELLO
  // Also this entry's identity. A connection closed while its copy runs stays listed until
  // the copy is done: a REVOKE naming it waits for that copy.
  std::shared_ptr<ReceiveCopies> copies;
};

class ServedConnections {
 public:
  /** False when a connection with this nonce is already listed (it stays; nonces are random). */
  bool add(const uint8_t* nonce, ServedConnection c) {
    std::lock_guard<std::mutex> lock(mu_);
    return by_nonce_.emplace(key(nonce), std::move(c)).second;
  }
  void remove(const uint8_t* nonce, const ReceiveCopies* id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_nonce_.find(key(nonce));
    if (it != by_nonce_.end() && it->second.copies.get() == id) by_nonce_.erase(it);
  }
  bool find(const uint8_t* nonce, ServedConnection* out) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_nonce_.find(key(nonce));
    if (it == by_nonce_.end()) return false;
    *out = it->second;
    return true;
  }

 private:
  static std::string key(const uint8_t* nonce) { return std::string(reinterpret_cast<const char*>(nonce), kNonceSize); }
  mutable std::mutex mu_;
  std::unordered_map<std::string, ServedConnection> by_nonce_;
};

}  // namespace tetcp
