// Peer bookkeeping on the rail threads: a broken connection, requests that got no answer
// (hello, region table, health check), and region table requests.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "impl.h"

namespace te::fabric {

void Transport::Impl::peer_broken(const std::shared_ptr<Peer>& p, const std::string& why) {
  int s = p->state.load();
  if (s >= 2) return;
  {
    std::lock_guard<std::mutex> l(p->mu);
    p->broken_reason = "connection to \"" + p->name + "\" lost: " + why;
  }
  p->state.store(2);
  fail_notifies(p, TE_CONNECTION_LOST,
                "connection to \"" + p->name + "\" lost before it acknowledged the notification: " + why);
  // A later openPeer must build a new connection: forget the address mapping.
  for (size_t r = 0; r < rails.size(); ++r) {
    int pr = p->peer_rail[r];
    rails[r]->forget_address(p->address.rails[static_cast<size_t>(pr)]);
  }
}

void Transport::Impl::fail_pending(uint64_t req, Pending& pd, int32_t status, const std::string& why) {
  (void)req;
  if (pd.kind == Pending::HELLO) {
    if (!pd.peer->open_reported.exchange(true)) {
      if (pd.peer->state.load() < 2) pd.peer->state.store(2);
      {
        std::lock_guard<std::mutex> l(pd.peer->mu);
        pd.peer->broken_reason = why;
      }
      Event e;
      e.kind = Event::OPEN;
      e.id = pd.peer->id;
      e.status = status;
      e.text = why;
      sink(std::move(e));
    }
  } else if (pd.kind == Pending::TABLE) {
    std::vector<std::shared_ptr<Batch>> parked, parked_next;
    {
      std::lock_guard<std::mutex> l(pd.peer->mu);
      pd.peer->table_pending = false;
      parked.swap(pd.peer->parked);
      parked_next.swap(pd.peer->parked_next);
    }
    table_settled(std::move(parked), std::move(parked_next));
  } else if (pd.kind == Pending::NOTIFY) {
    if (pd.batch) {
      pd.batch->fail_message(why);
      pd.batch->batch_status.store(status);
      complete(pd.batch);
    }
  } else if (pd.kind == Pending::CHECK) {
    auto it = checks.find(pd.check_id);
    if (it != checks.end()) {
      it->second.ok = false;
      it->second.rails.push_back("{\"rail\":" + std::to_string(pd.rail) + ",\"ok\":false,\"error\":\"" +
                                 json_escape(why) + "\"}");
      if (--it->second.left == 0) {
        Event e;
        e.kind = Event::CHECK;
        e.id = pd.check_id;
        e.status = it->second.ok ? 0 : TE_PEER_UNREACHABLE;
        std::string rs;
        for (auto& x : it->second.rails) rs += (rs.empty() ? "" : ",") + x;
        e.text = "{\"healthy\":false,\"rails\":[" + rs + "]}";
        checks.erase(it);
        sink(std::move(e));
      }
    }
  }
}

void Transport::Impl::fail_hellos(const std::shared_ptr<Peer>& p, int32_t status, const std::string& why) {
  std::lock_guard<std::mutex> l(pending_mu);
  for (auto it = pending.begin(); it != pending.end();) {
    if (it->second.kind == Pending::HELLO && it->second.peer == p) {
      Pending pd = it->second;
      it = pending.erase(it);
      fail_pending(0, pd, status, why);
    } else {
      ++it;
    }
  }
}

void Transport::Impl::fail_notifies(const std::shared_ptr<Peer>& p, int32_t status, const std::string& why) {
  std::lock_guard<std::mutex> l(pending_mu);
  for (auto it = pending.begin(); it != pending.end();) {
    if (it->second.kind == Pending::NOTIFY && it->second.peer == p) {
      Pending pd = it->second;
      it = pending.erase(it);
      fail_pending(0, pd, status, why);
    } else {
      ++it;
    }
  }
}

void Transport::Impl::notify_failed(const std::shared_ptr<Batch>& b, int32_t status, const std::string& why) {
  {
    std::lock_guard<std::mutex> l(pending_mu);
    if (b->notify_req) pending.erase(b->notify_req);
  }
  if (!why.empty()) b->fail_message(why);
  b->batch_status.store(status);
  complete(b);
}

void Transport::Impl::request_table(const std::shared_ptr<Peer>& p) {
  uint64_t req = next_req++;
  {
    std::lock_guard<std::mutex> l(pending_mu);
    Pending pd;
    pd.kind = Pending::TABLE;
    pd.peer = p;
    pd.sent = now_ms();
    pd.deadline = pd.sent + opt.connect_timeout_ms;
    track_pending(req, pd);
  }
  wire::Header h = header(0, wire::TABLE_REQ, p->epoch);
  h.req_id = req;
  send_ctrl(0, p, h, {});
}

}  // namespace te::fabric
