// The fabric transport tests' fixture: a transport on one rail over loopback, its events
// collected, its internals reachable (TransportTestAccess), and the helpers several cases
// use to craft messages and open peers.
#pragma once

#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../../test/check.h"
#include "../src/impl.h"

namespace te::fabric {
struct TransportTestAccess {
  static Transport::Impl& impl(Transport& t) { return *t.impl_; }
};
}  // namespace te::fabric

namespace fabric_test {

using namespace te::fabric;

struct Node {
  std::mutex mu;
  std::vector<Event> events;
  std::unique_ptr<Transport> t;
  bool ok = false;

  explicit Node(const std::string& name, uint64_t epoch, Options o = Options()) {
    o.segment_name = name;
    o.epoch = epoch;
    if (o.provider.empty()) o.provider = "tcp;ofi_rxm";
    o.source_address = "127.0.0.1";
    o.max_rails = 1;
    o.connect_timeout_ms = 2000;
    t = std::make_unique<Transport>(o, [this](Event e) {
      std::lock_guard<std::mutex> l(mu);
      events.push_back(std::move(e));
    });
    std::string err;
    ok = t->start(&err) == te::TE_OK;
    if (!ok) fprintf(stderr, "cannot start %s: %s\n", name.c_str(), err.c_str());
  }
  Transport::Impl& m() { return TransportTestAccess::impl(*t); }
  Rail& rail() { return *m().rails[0]; }
  size_t count(Event::Kind k) {
    std::lock_guard<std::mutex> l(mu);
    size_t n = 0;
    for (auto& e : events) n += e.kind == k;
    return n;
  }
  bool wait_for(Event::Kind k, size_t n, int ms = 5000) {
    for (int i = 0; i < ms / 10; ++i) {
      if (count(k) >= n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  size_t av_entries() {
    std::lock_guard<std::mutex> l(rail().av_mu);
    return rail().addresses.size();
  }
  size_t queued_ctrl() {
    std::lock_guard<std::mutex> l(rail().q_mu);
    return rail().ctrl.size();
  }
  /** Stops the rail thread (queued messages stay queued); close() still cleans up. */
  void stop_rail_thread() {
    rail().stop.store(true);
    if (rail().can_wait) fi_cq_signal(rail().cq);
    rail().thread.join();
  }
};

inline std::vector<uint8_t> message(uint8_t type, const std::vector<uint8_t>& sender, uint64_t target_epoch,
                                    uint64_t req = 1, const std::vector<uint8_t>& body = {}, uint8_t flags = 0) {
  wire::Header h;
  h.type = type;
  h.flags = flags;
  h.req_id = req;
  h.sender_epoch = 99;
  h.target_epoch = target_epoch;
  h.sender_addr = sender;
  std::vector<uint8_t> out;
  wire::put_header(out, h);
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

inline void deliver(Node& n, const std::vector<uint8_t>& msg) { n.m().on_message(n.rail(), msg.data(), msg.size()); }

// Opens `target` from `from` (waits for the OPEN event); 0 when it did not open.
inline uint64_t open_to(Node& from, Node& target, uint64_t epoch) {
  PeerAddress pa;
  pa.rails = {target.rail().pub.addr};
  pa.virt_addr = {target.rail().pub.virt_addr};
  pa.provider = target.rail().pub.provider;
  size_t opens = from.count(Event::OPEN);
  uint64_t id = from.t->open_peer("target", epoch, pa, false, {});
  if (!from.wait_for(Event::OPEN, opens + 1)) return 0;
  std::lock_guard<std::mutex> l(from.mu);
  for (auto& e : from.events)
    if (e.kind == Event::OPEN && e.id == id) return e.status == te::TE_OK ? id : 0;
  return 0;
}

// A target with one registered, remote-writable buffer, opened from `sender` with its region
// (so writes are validated and posted at once); the peer id, 0 when it did not open.
inline uint64_t open_with_region(Node& sender, Node& target, uint64_t epoch, std::vector<uint8_t>& buf) {
  std::vector<uint64_t> keys;
  uint64_t base = 0;
  std::string err;
  const uint64_t ra = reinterpret_cast<uint64_t>(buf.data());
  if (target.t->register_memory(ra, buf.size(), true, &keys, &base, &err) != te::TE_OK) return 0;
  PeerAddress pa;
  pa.rails = {target.rail().pub.addr};
  pa.virt_addr = {target.rail().pub.virt_addr};
  pa.provider = target.rail().pub.provider;
  RemoteRegion reg;
  reg.addr = ra;
  reg.length = buf.size();
  reg.base = base;
  reg.keys = keys;
  size_t opens = sender.count(Event::OPEN);
  uint64_t id = sender.t->open_peer(target.m().opt.segment_name, epoch, pa, false, {reg});
  return sender.wait_for(Event::OPEN, opens + 1) ? id : 0;
}

inline int peer_state(Node& n, uint64_t peer) {
  std::lock_guard<std::mutex> l(n.m().peers_mu);
  auto it = n.m().peers.find(peer);
  return it == n.m().peers.end() ? -1 : it->second->state.load();
}

// A batch of no requests that carries `payload` as its notification; the outcome once
// settled (nullptr when it did not settle within `ms`).
inline std::unique_ptr<BatchOutcome> notify_batch(Node& n, uint64_t peer, const std::string& payload, int ms = 8000,
                                                  uint64_t* id_out = nullptr, bool wait = true) {
  std::string err;
  uint64_t bid = 0;
  size_t batches = n.count(Event::BATCH);
  if (n.t->submit(peer, nullptr, nullptr, nullptr, nullptr, 0, reinterpret_cast<const uint8_t*>(payload.data()),
                  payload.size(), &bid, &err) != te::TE_OK)
    return nullptr;
  if (id_out) *id_out = bid;
  if (!wait || !n.wait_for(Event::BATCH, batches + 1, ms)) return nullptr;
  return n.t->take_batch(bid);
}

}  // namespace fabric_test
