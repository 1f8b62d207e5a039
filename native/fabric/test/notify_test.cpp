// The fabric transport's notifications: the receiver's bounded queue, the acknowledgement a
// sender's batch waits for, and forged or missing acknowledgements. Cases of
// te_fabric_transport_tests (transport_test.cpp runs them).
#include <memory>
#include <string>
#include <vector>

#include "transport_test_node.h"

using namespace te::fabric;
using namespace fabric_test;

namespace {

std::vector<uint8_t> notify_body(const std::string& from, size_t payload) {
  std::vector<uint8_t> b;
  wire::put_u16(b, static_cast<uint16_t>(from.size()));
  wire::put_bytes(b, from.data(), from.size());
  wire::put_u32(b, static_cast<uint32_t>(payload));
  std::vector<uint8_t> p(payload, 0x5a);
  wire::put_bytes(b, p.data(), p.size());
  return b;
}

}  // namespace

// Finding 3: every NOTIFY went to the sink (the addon's unbounded queue). Now at most
// notify_queue_per_peer per sender and notify_queue_bytes in all wait to be taken.
void test_notify_budget() {
  Options o;
  o.notify_queue_per_peer = 3;
  o.notify_queue_bytes = 3 * (1000 + 256) + 3 * (256 + 10);
  Node n("notified", 7, o);
  CHECK(n.ok);
  if (!n.ok) return;
  std::vector<uint8_t> any = n.rail().pub.addr;
  for (int i = 0; i < 6; ++i) deliver(n, message(wire::NOTIFY, any, 7, 1, notify_body("flood", 10)));
  CHECK(n.count(Event::NOTIFY) == 3);  // per sender
  n.t->notification_taken("flood", 10);
  deliver(n, message(wire::NOTIFY, any, 7, 1, notify_body("flood", 10)));
  CHECK(n.count(Event::NOTIFY) == 4);  // a place was freed
  // Bytes, all senders together: 3 x 1000 B from three senders fit, a fourth does not.
  for (int s = 0; s < 4; ++s)
    deliver(n, message(wire::NOTIFY, any, 7, 1, notify_body("big" + std::to_string(s), 1000)));
  CHECK(n.count(Event::NOTIFY) == 7);
  n.t->close();
}

// Item: a NOTIFY is acknowledged. Within the receiver's budget the sender's batch succeeds
// and the listener gets it; over it the batch fails with POOL_EXHAUSTED (it used to
// succeed, the notification silently dropped) and nothing is delivered.
void test_notify_acknowledged() {
  Options o;
  o.notify_queue_per_peer = 1;
  Node target("acked", 21, o), sender("acker", 22);
  CHECK(target.ok && sender.ok);
  if (!target.ok || !sender.ok) return;
  uint64_t peer = open_to(sender, target, 21);
  CHECK(peer != 0);
  auto first = notify_batch(sender, peer, "first");
  CHECK(first != nullptr);
  if (first) CHECK(first->status == te::TE_OK);
  CHECK(target.count(Event::NOTIFY) == 1);
  {
    std::lock_guard<std::mutex> l(target.mu);
    for (auto& e : target.events)
      if (e.kind == Event::NOTIFY)
        CHECK(e.text == "acker" && std::string(e.payload.begin(), e.payload.end()) == "first");
  }
  auto second = notify_batch(sender, peer, "second");  // the listener has not taken the first
  CHECK(second != nullptr);
  if (second) {
    CHECK(second->status == te::TE_POOL_EXHAUSTED);
    CHECK(second->message.find("notification queue is full") != std::string::npos);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(target.count(Event::NOTIFY) == 1);
  target.t->notification_taken("acker", 5);
  auto third = notify_batch(sender, peer, "third");  // a place was freed
  CHECK(third != nullptr);
  if (third) CHECK(third->status == te::TE_OK);
  CHECK(target.count(Event::NOTIFY) == 2);
  {
    std::lock_guard<std::mutex> l(sender.m().pending_mu);
    CHECK(sender.m().pending.empty());  // every wait for an ack ended
  }
  sender.t->close();
  target.t->close();
}

// A receiver that never answers: the sender's batch does not hang. It settles when the
// engine cancels it at its deadline, fails with TIMEOUT at the transport's own ack
// deadline, and with CONNECTION_LOST when the peer is closed meanwhile.
void test_notify_unanswered() {
  Options so;
  so.connect_timeout_ms = 1000;  // ack deadline: 2 s
  Node target("mute", 23), sender("asker", 24, so);
  CHECK(target.ok && sender.ok);
  if (!target.ok || !sender.ok) return;
  uint64_t peer = open_to(sender, target, 23);
  CHECK(peer != 0);
  target.stop_rail_thread();  // receives nothing more, answers nothing
  uint64_t bid = 0;
  CHECK(notify_batch(sender, peer, "x", 0, &bid, false) == nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(sender.t->take_batch(bid) == nullptr);  // waiting for the ack
  size_t batches = sender.count(Event::BATCH);
  sender.t->cancel(bid, te::TE_TIMEOUT);
  CHECK(sender.wait_for(Event::BATCH, batches + 1, 1000));
  auto cancelled = sender.t->take_batch(bid);
  CHECK(cancelled != nullptr);
  if (cancelled) CHECK(cancelled->status == te::TE_TIMEOUT);
  auto late = notify_batch(sender, peer, "y", 6000);
  CHECK(late != nullptr);
  if (late) CHECK(late->status == te::TE_TIMEOUT);
  CHECK(notify_batch(sender, peer, "z", 0, &bid, false) == nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  batches = sender.count(Event::BATCH);
  sender.t->close_peer(peer);
  CHECK(sender.wait_for(Event::BATCH, batches + 1, 1000));
  auto lost = sender.t->take_batch(bid);
  CHECK(lost != nullptr);
  if (lost) CHECK(lost->status == te::TE_CONNECTION_LOST);
  sender.t->close();
  target.t->close();
}

// Crafted NOTIFY_ACKs: one for an unknown request, one from another address than the peer's
// for a request that exists, are ignored (no crash, the batch keeps waiting).
void test_notify_ack_forged(Node& a, Node& b) {
  for (uint64_t req : {uint64_t(0), uint64_t(123456789), ~uint64_t(0)})
    for (int32_t st : {0, int32_t(te::TE_POOL_EXHAUSTED), 12345}) {
      wire::Header h;
      h.type = wire::NOTIFY_ACK;
      h.req_id = req;
      h.sender_epoch = 8;
      h.target_epoch = 7;
      h.status = st;
      h.sender_addr = b.rail().pub.addr;
      std::vector<uint8_t> m;
      wire::put_header(m, h);
      deliver(a, m);
    }
  // A pending notification to "b", answered by someone else.
  PeerAddress pa;
  pa.rails = {b.rail().pub.addr};
  pa.virt_addr = {b.rail().pub.virt_addr};
  pa.provider = b.rail().pub.provider;
  size_t opens = a.count(Event::OPEN);
  uint64_t id = a.t->open_peer("b3", 8, pa, false, {});
  CHECK(a.wait_for(Event::OPEN, opens + 1));
  std::shared_ptr<Peer> p;
  {
    std::lock_guard<std::mutex> l(a.m().peers_mu);
    p = a.m().peers[id];
  }
  auto batch = std::make_shared<Batch>();
  batch->id = 987654321;
  batch->peer = p;
  batch->statuses.reset(new std::atomic<int32_t>[1]);
  batch->req_left.reset(new std::atomic<uint32_t>[1]);
  const uint64_t req = 777000111;
  {
    std::lock_guard<std::mutex> l(a.m().pending_mu);
    Pending pd;
    pd.kind = Pending::NOTIFY;
    pd.peer = p;
    pd.batch = batch;
    pd.sent = te::now_ms();
    pd.deadline = pd.sent + 60000;
    a.m().pending[req] = pd;
    batch->notify_req = req;
  }
  std::vector<uint8_t> stranger = a.rail().pub.addr;  // well-formed, not the peer's
  deliver(a, message(wire::NOTIFY_ACK, stranger, 7, req));
  CHECK(!batch->done.load());
  auto wrong_epoch = message(wire::NOTIFY_ACK, b.rail().pub.addr, 7, req);  // sender_epoch 99, b's is 8
  deliver(a, wrong_epoch);
  CHECK(!batch->done.load());
  // Control: the peer's own answer settles it.
  wire::Header h;
  h.type = wire::NOTIFY_ACK;
  h.req_id = req;
  h.sender_epoch = 8;
  h.target_epoch = 7;
  h.status = te::TE_POOL_EXHAUSTED;
  h.sender_addr = b.rail().pub.addr;
  std::vector<uint8_t> ok;
  wire::put_header(ok, h);
  deliver(a, ok);
  CHECK(batch->done.load());
  auto out = a.t->take_batch(batch->id);
  CHECK(out != nullptr);
  if (out) CHECK(out->status == te::TE_POOL_EXHAUSTED);
  a.t->close_peer(id);
}
