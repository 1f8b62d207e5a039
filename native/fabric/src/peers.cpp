// Opening a peer (address vector entries and a hello on every rail), closing it, and
// checking its health.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "impl.h"

namespace te::fabric {

uint64_t Transport::open_peer(const std::string& name, uint64_t epoch, const PeerAddress& address, bool same_process,
                              const std::vector<RemoteRegion>& regions) {
  Impl& m = *impl_;
  auto p = std::make_shared<Peer>();
  p->name = name;
  p->epoch = epoch;
  p->same_process = same_process;
  p->address = address;
  for (auto& r : regions) p->regions[r.addr] = r;
  {
    std::lock_guard<std::mutex> l(m.peers_mu);
    p->id = m.next_peer++;
    m.peers[p->id] = p;
  }
  auto fail = [&](int32_t st, const std::string& why) {
    p->state.store(2);
    p->open_reported.store(true);
    Event e;
    e.kind = Event::OPEN;
    e.id = p->id;
    e.status = st;
    e.text = why;
    m.sink(std::move(e));
    return p->id;
  };
  if (same_process) {
    p->state.store(1);
    p->open_reported.store(true);
    Event e;
    e.kind = Event::OPEN;
    e.id = p->id;
    m.sink(std::move(e));
    return p->id;
  }
  if (address.rails.empty()) return fail(TE_INVALID_ARGUMENT, "segment \"" + name + "\" publishes no rail address");
  std::string err;
  size_t n = m.rails.size();
  p->hellos_left = static_cast<int>(n);
  std::vector<int> peer_rail;
  std::vector<fi_addr_t> dest;
  for (size_t r = 0; r < n; ++r) {
    int pr = static_cast<int>(r % address.rails.size());
    peer_rail.push_back(pr);
    fi_addr_t fa = m.rails[r]->address_of(address.rails[static_cast<size_t>(pr)], &err);
    if (fa == FI_ADDR_NOTAVAIL) return fail(TE_PEER_UNREACHABLE, err);
    dest.push_back(fa);
  }
  {
    // Published under peers_mu: the rail threads read every peer's dest (addresses_in_use).
    std::lock_guard<std::mutex> l(m.peers_mu);
    p->peer_rail = std::move(peer_rail);
    p->dest = std::move(dest);
  }
  for (size_t r = 0; r < n; ++r) {
    uint64_t req = m.next_req++;
    {
      std::lock_guard<std::mutex> l(m.pending_mu);
      Pending pd;
      pd.kind = Pending::HELLO;
      pd.peer = p;
      pd.rail = static_cast<int>(r);
      pd.sent = now_ms();
      pd.deadline = pd.sent + m.opt.connect_timeout_ms;
      m.track_pending(req, pd);
    }
    wire::Header h = m.header(static_cast<int>(r), wire::HELLO, epoch);
    h.req_id = req;
    std::vector<uint8_t> body;
    wire::put_u16(body, static_cast<uint16_t>(m.opt.segment_name.size()));
    wire::put_bytes(body, m.opt.segment_name.data(), m.opt.segment_name.size());
    m.send_ctrl(static_cast<int>(r), p, h, body);
  }
  return p->id;
}

void Transport::close_peer(uint64_t id) {
  Impl& m = *impl_;
  std::shared_ptr<Peer> p;
  {
    std::lock_guard<std::mutex> l(m.peers_mu);
    auto it = m.peers.find(id);
    if (it == m.peers.end()) return;
    p = it->second;
    m.peers.erase(it);
  }
  if (p->state.load() < 2) p->state.store(3);
  m.fail_notifies(p, TE_CONNECTION_LOST, "peer \"" + p->name + "\" was closed before it acknowledged the notification");
}

Status Transport::check_peer(uint64_t id, int timeout_ms, uint64_t* check_id, std::string* err) {
  Impl& m = *impl_;
  std::shared_ptr<Peer> p;
  {
    std::lock_guard<std::mutex> l(m.peers_mu);
    auto it = m.peers.find(id);
    if (it != m.peers.end()) p = it->second;
  }
  if (!p) return *err = "peer was not opened by this transport", TE_PEER_NOT_FOUND;
  uint64_t cid = m.next_req++;
  *check_id = cid;
  if (p->same_process || p->state.load() >= 2) {
    Event e;
    e.kind = Event::CHECK;
    e.id = cid;
    std::string why;
    {
      std::lock_guard<std::mutex> l(p->mu);
      why = p->broken_reason;
    }
    e.status = p->same_process ? 0 : TE_CONNECTION_LOST;
    e.text = p->same_process ? "{\"healthy\":true,\"rails\":[],\"sameProcess\":true}"
                             : "{\"healthy\":false,\"rails\":[],\"error\":\"" + json_escape(why) + "\"}";
    m.sink(std::move(e));
    return TE_OK;
  }
  {
    std::lock_guard<std::mutex> l(m.pending_mu);
    CheckState cs;
    cs.peer = p;
    cs.left = static_cast<int>(m.rails.size());
    m.checks[cid] = cs;
    for (size_t r = 0; r < m.rails.size(); ++r) {
      Pending pd;
      pd.kind = Pending::CHECK;
      pd.peer = p;
      pd.rail = static_cast<int>(r);
      pd.check_id = cid;
      pd.sent = now_ms();
      pd.deadline = pd.sent + timeout_ms;
      uint64_t req = m.next_req++;
      m.track_pending(req, pd);
      wire::Header h = m.header(static_cast<int>(r), wire::HELLO, p->epoch);
      h.req_id = req;
      m.send_ctrl(static_cast<int>(r), p, h, {});
    }
  }
  return TE_OK;
}

}  // namespace te::fabric
