// C++ tests of te_fabric's handling of hostile control messages and of lost peers, over
// libfabric's tcp;ofi_rxm provider on loopback (no NIC needed; the sockets provider where a
// case needs it). Crafted messages are handed to the receiving rail's on_message, exactly as
// the rail thread does with received bytes.
// Built with the core's tests (native/CMakeLists.txt) and run by ctest (native/scripts/test.sh),
// and under ASan + UBSan by scripts/sanitize.sh. Exit 77: libfabric's tcp provider is missing.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "transport_test_node.h"

using namespace te::fabric;
using namespace fabric_test;

namespace {

// Finding 1: a HELLO / TABLE_REQ / REVOKE naming a sender address of another length than
// the provider's (0 included) reached fi_av_insert, which read the provider's fixed length
// from it: a null dereference for 0 bytes, a heap over-read for fewer. Refused now: no AV
// entry, no answer queued.
void test_sender_address_of_wrong_length(Node& victim, Node& other) {
  const std::vector<uint8_t>& good = other.rail().pub.addr;
  const size_t alen = victim.rail().pub.addr.size();
  CHECK(good.size() == alen);
  const size_t av0 = victim.av_entries();
  for (size_t len : {size_t(0), size_t(1), size_t(5), alen - 1, alen + 1, size_t(200)}) {
    std::vector<uint8_t> bad(len, 0xab);
    if (len >= 2) memcpy(bad.data(), good.data(), 2);  // even with the right family
    for (uint8_t type : {wire::HELLO, wire::TABLE_REQ, wire::REVOKE}) deliver(victim, message(type, bad, 7));
  }
  // The right length with another socket family is refused as well.
  std::vector<uint8_t> family = good;
  family[0] ^= 0x0f;
  deliver(victim, message(wire::HELLO, family, 7));
  CHECK(victim.av_entries() == av0);
  CHECK(victim.rail().address_fits(good));
  CHECK(!victim.rail().address_fits({}));
  CHECK(!victim.rail().address_fits(family));
  // Control: a well-formed hello is answered (its address enters the AV).
  deliver(victim, message(wire::HELLO, good, 7));
  CHECK(victim.av_entries() == av0 + 1);
}

std::vector<uint8_t> table_body(uint16_t nkeys, uint64_t addr, uint64_t len) {
  std::vector<uint8_t> b;
  wire::put_u16(b, nkeys);
  wire::put_u32(b, 1);
  wire::put_u64(b, addr);
  wire::put_u64(b, len);
  wire::put_u64(b, addr);
  for (uint16_t k = 0; k < nkeys; ++k) wire::put_u64(b, 0x1234 + k);
  return b;
}

// Finding 2: a TABLE with 0 keys per region (or fewer than the peer's rails) was stored,
// and the next batch into it indexed the empty key vector. Refused at parse and at use.
void test_table_without_keys(Node& a, Node& b) {
  CHECK(b.rail().pub.addr.size() > 0);
  PeerAddress pa;
  pa.rails = {b.rail().pub.addr, b.rail().pub.addr};  // a peer of two rails
  pa.virt_addr = {true, true};
  pa.provider = b.rail().pub.provider;
  uint64_t id = a.t->open_peer("b", 8, pa, false, {});
  CHECK(a.wait_for(Event::OPEN, 1));
  std::shared_ptr<Peer> p;
  {
    std::lock_guard<std::mutex> l(a.m().peers_mu);
    p = a.m().peers[id];
  }
  CHECK(p != nullptr);
  if (!p) return;
  // The parser refuses a table without keys.
  {
    std::vector<uint8_t> body = table_body(0, 0x10000, 4096);
    wire::Reader r{body.data(), body.size(), 0};
    std::vector<wire::TableEntry> out;
    CHECK(!wire::get_table(r, &out));
  }
  auto answer = [&](uint16_t nkeys) {
    uint64_t req = 1000000 + nkeys;
    {
      std::lock_guard<std::mutex> l(a.m().pending_mu);
      Pending pd;
      pd.kind = Pending::TABLE;
      pd.peer = p;
      pd.sent = te::now_ms();
      pd.deadline = pd.sent + 60000;
      a.m().pending[req] = pd;
    }
    deliver(a, message(wire::TABLE, b.rail().pub.addr, 7, req, table_body(nkeys, 0x10000, 4096), wire::kLast));
    std::lock_guard<std::mutex> l(p->mu);
    return p->regions.size();
  };
  CHECK(answer(0) == 0);  // no keys
  CHECK(answer(1) == 0);  // fewer keys than the peer's two rails
  CHECK(answer(2) == 1);  // control: accepted
  a.t->close_peer(id);
}

// Finding 2, at use: a region handed in by open_peer (the peer's descriptor) without keys
// fails the request instead of being indexed.
void test_region_without_keys_at_use(Node& a, Node& b) {
  PeerAddress pa;
  pa.rails = {b.rail().pub.addr};
  pa.virt_addr = {};  // shorter than the rails: read as offset addressing, never indexed
  pa.provider = b.rail().pub.provider;
  RemoteRegion reg;
  reg.addr = 0x20000;
  reg.length = 4096;
  reg.base = 0x20000;
  size_t opens = a.count(Event::OPEN);
  uint64_t id = a.t->open_peer("b2", 8, pa, false, {reg});
  CHECK(a.wait_for(Event::OPEN, opens + 1));
  static std::vector<uint8_t> local(4096);
  std::vector<uint64_t> keys;
  uint64_t base = 0;
  std::string err;
  uint64_t la = reinterpret_cast<uint64_t>(local.data());
  CHECK(a.t->register_memory(la, local.size(), false, &keys, &base, &err) == te::TE_OK);
  uint8_t op = 1;
  uint64_t remote = 0x20000, len = 64, bid = 0;
  size_t batches = a.count(Event::BATCH);
  CHECK(a.t->submit(id, &op, &la, &remote, &len, 1, nullptr, 0, &bid, &err) == te::TE_OK);
  CHECK(a.wait_for(Event::BATCH, batches + 1));
  auto out = a.t->take_batch(bid);
  CHECK(out != nullptr);
  if (out) CHECK(out->statuses.size() == 1 && out->statuses[0] == te::TE_MEMORY_NOT_REGISTERED);
  a.t->close_peer(id);
  a.t->unregister_memory(la, &err);
}

// Finding 4: answers (HELLO_ACK, TABLE, REVOKE_ACK) queued per request without a bound. A
// flood of hellos queues at most kMaxAnswers while the rail cannot send.
void test_answers_bounded(Node& other) {
  Node n("flooded", 7);
  CHECK(n.ok);
  if (!n.ok) return;
  n.stop_rail_thread();
  const auto msg = message(wire::HELLO, other.rail().pub.addr, 7);
  for (size_t i = 0; i < Rail::kMaxAnswers + 100; ++i) deliver(n, msg);
  CHECK(n.queued_ctrl() == Rail::kMaxAnswers);
  n.t->close();
}

// A message of another wire version is refused by the parser (a mixed pair fails to open
// instead of misreading NOTIFY answers).
void test_other_version_refused(Node& b) {
  auto m = message(wire::HELLO, b.rail().pub.addr, 7);
  wire::Header h;
  size_t off = 0;
  CHECK(wire::get_header(m.data(), m.size(), &h, &off));
  m[4] = 1;  // version 1
  m[5] = 0;
  CHECK(!wire::get_header(m.data(), m.size(), &h, &off));
}

// Item: av_map had one permanent entry per distinct well-formed sender address. Beyond its
// bound the least recently used entries that no peer opened here uses are evicted (and
// removed from the AV once nothing uses them); an opened peer's entry stays and works.
void test_av_map_bounded() {
  Node victim("crowded", 31), real("real", 32);
  CHECK(victim.ok && real.ok);
  if (!victim.ok || !real.ok) return;
  const size_t cap = 64;
  victim.rail().addresses.max_entries = cap;
  uint64_t peer = open_to(victim, real, 32);  // a peer opened here: pinned
  CHECK(peer != 0);
  const std::vector<uint8_t> real_addr = real.rail().pub.addr;
  // Senders at 127.3.x.y:9 (sockaddr_in like this rail's: family, port, address, zeros;
  // nothing listens there, so the answers queued to them fail fast).
  std::vector<uint8_t> base = victim.rail().pub.addr;
  CHECK(base.size() == 16);
  if (base.size() != 16) return;
  const int senders = 4 * static_cast<int>(cap);
  for (int i = 0; i < senders; ++i) {
    std::vector<uint8_t> a = base;
    a[2] = 0, a[3] = 9;
    a[4] = 127, a[5] = 3, a[6] = static_cast<uint8_t>(i / 250), a[7] = static_cast<uint8_t>(1 + i % 250);
    deliver(victim, message(wire::HELLO, a, 31, 5000 + static_cast<uint64_t>(i)));
    CHECK(victim.av_entries() <= cap);
  }
  CHECK(victim.av_entries() == cap);
  CHECK(victim.rail().lookup_address(real_addr) != FI_ADDR_NOTAVAIL);  // least recently used, but pinned
  // The evicted entries leave the AV (retired by the rail thread once nothing uses them).
  bool drained = false;
  for (int i = 0; i < 500 && !drained; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::lock_guard<std::mutex> l(victim.rail().av_mu);
    drained = victim.rail().addresses.retiring_empty();
  }
  CHECK(drained);
  // The real peer still works both ways: a notification from here is acknowledged, and it
  // opens this side in turn.
  auto out = notify_batch(victim, peer, "still here");
  CHECK(out != nullptr);
  if (out) CHECK(out->status == te::TE_OK);
  CHECK(real.count(Event::NOTIFY) == 1);
  CHECK(open_to(real, victim, 31) != 0);
  CHECK(victim.av_entries() <= cap);
  victim.t->close();
  real.t->close();
}

// One write of `len` bytes from `local` to `remote` at the peer; the outcome once settled.
std::unique_ptr<BatchOutcome> write_batch(Node& n, uint64_t peer, uint64_t local, uint64_t remote, uint64_t len,
                                          int ms = 8000) {
  std::string err;
  uint8_t op = 1;
  uint64_t bid = 0;
  size_t batches = n.count(Event::BATCH);
  if (n.t->submit(peer, &op, &local, &remote, &len, 1, nullptr, 0, &bid, &err) != te::TE_OK) return nullptr;
  if (!n.wait_for(Event::BATCH, batches + 1, ms)) return nullptr;
  return n.t->take_batch(bid);
}

// A peer whose process went away, on the sockets provider: once the provider has dropped the
// connection, a write to it is refused at posting (the provider cannot connect again: it
// answers FI_ENOENT) rather than failed by a completion. That is the lost connection too, and
// the peer is marked broken, so what is queued behind it is refused without a retry.
void test_dead_peer_refused_at_posting() {
  Options o;
  o.provider = "sockets";
  Node target("gone", 41, o), sender("left", 42, o);
  if (!target.ok || !sender.ok) {
    fprintf(stderr, "transport_test: sockets provider unavailable, dead-peer case not run\n");
    return;
  }
  static std::vector<uint8_t> remote_buf(64 * 1024, 0x5a), local_buf(64 * 1024, 0x11);
  std::vector<uint64_t> keys;
  uint64_t base = 0;
  std::string err;
  const uint64_t ra = reinterpret_cast<uint64_t>(remote_buf.data()), la = reinterpret_cast<uint64_t>(local_buf.data());
  CHECK(target.t->register_memory(ra, remote_buf.size(), true, &keys, &base, &err) == te::TE_OK);
  std::vector<uint64_t> local_keys;
  uint64_t local_base = 0;
  CHECK(sender.t->register_memory(la, local_buf.size(), false, &local_keys, &local_base, &err) == te::TE_OK);
  PeerAddress pa;
  pa.rails = {target.rail().pub.addr};
  pa.virt_addr = {target.rail().pub.virt_addr};
  pa.provider = target.rail().pub.provider;
  RemoteRegion reg;
  reg.addr = ra;
  reg.length = remote_buf.size();
  reg.base = base;
  reg.keys = keys;
  size_t opens = sender.count(Event::OPEN);
  uint64_t peer = sender.t->open_peer("gone", 41, pa, false, {reg});
  CHECK(sender.wait_for(Event::OPEN, opens + 1));
  auto first = write_batch(sender, peer, la, ra, 4096);
  CHECK(first != nullptr && first->status == te::TE_OK && first->statuses.size() == 1 &&
        first->statuses[0] == te::TE_OK);
  CHECK(remote_buf[0] == 0x11);
  // The target goes away: its endpoint and listener close, nothing answers at its address.
  target.t->close();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto lost = write_batch(sender, peer, la, ra, 4096);
  CHECK(lost != nullptr);
  if (lost) {
    CHECK(lost->statuses.size() == 1);
    if (!lost->statuses.empty()) CHECK(lost->statuses[0] == te::TE_CONNECTION_LOST);
    if (lost->statuses.empty() || lost->statuses[0] != te::TE_CONNECTION_LOST)
      fprintf(stderr, "  dead peer: status %d (%s)\n", lost->statuses.empty() ? 0 : lost->statuses[0],
              lost->message.c_str());
  }
  std::shared_ptr<Peer> p;
  {
    std::lock_guard<std::mutex> l(sender.m().peers_mu);
    p = sender.m().peers[peer];
  }
  CHECK(p && p->state.load() == 2);  // broken: later batches fail at once
  // The refused posting failed that write and that peer, not the rail's guarantee.
  CHECK(sender.rail().delivery_complete && sender.t->rails()[0].delivery_complete);
  sender.t->close();
}

// A write the provider refuses at posting fails alone: the rail keeps asking for delivery
// completion on every later write, to that peer and to others, and says so in rails().
// (The rail used to retry the refused write without FI_DELIVERY_COMPLETE and drop the flag
// for good, while still reporting it on: later writes completed once merely sent.)
void test_post_error_keeps_delivery_complete() {
  Node sender("dc-sender", 61), one("dc-one", 62), two("dc-two", 63);
  CHECK(sender.ok && one.ok && two.ok);
  if (!sender.ok || !one.ok || !two.ok) return;
  static std::vector<uint8_t> buf_one(64 * 1024, 0), buf_two(64 * 1024, 0), local(64 * 1024, 0x3c);
  std::vector<uint64_t> lkeys;
  uint64_t lbase = 0;
  std::string err;
  const uint64_t la = reinterpret_cast<uint64_t>(local.data());
  CHECK(sender.t->register_memory(la, local.size(), false, &lkeys, &lbase, &err) == te::TE_OK);
  const uint64_t p1 = open_with_region(sender, one, 62, buf_one), p2 = open_with_region(sender, two, 63, buf_two);
  CHECK(p1 != 0 && p2 != 0);
  if (!p1 || !p2) return;
  Rail& rail = sender.rail();
  auto dc_ops = [&] { return sender.t->rails()[0].rma_delivery_complete_ops; };

  // 1. An argument the provider refuses (not a connection error): that write fails, the peer stays.
  rail.injected_post_errno = FI_EINVAL;
  rail.injected_post_errors.store(1);
  auto refused = write_batch(sender, p1, la, reinterpret_cast<uint64_t>(buf_one.data()), 4096);
  CHECK(refused != nullptr && refused->statuses.size() == 1 && refused->statuses[0] == te::TE_TRANSFER_FAILED);
  CHECK(buf_one[0] == 0);
  CHECK(peer_state(sender, p1) < 2);
  CHECK(rail.delivery_complete && sender.t->rails()[0].delivery_complete);
  uint64_t before = dc_ops();
  auto next = write_batch(sender, p1, la, reinterpret_cast<uint64_t>(buf_one.data()), 4096);
  CHECK(next != nullptr && next->status == te::TE_OK);
  CHECK(buf_one[0] == 0x3c && buf_one[4095] == 0x3c);
  CHECK(dc_ops() == before + 1);  // posted with FI_DELIVERY_COMPLETE, as before the error

  // 2. "No connection, and none can be made" (what sockets answers once a peer died): the
  // write fails as a lost connection and its peer is broken; the other peer is untouched.
  rail.injected_post_errno = FI_ENOENT;
  rail.injected_post_errors.store(1);
  auto lost = write_batch(sender, p1, la, reinterpret_cast<uint64_t>(buf_one.data()) + 8192, 4096);
  CHECK(lost != nullptr && lost->statuses.size() == 1 && lost->statuses[0] == te::TE_CONNECTION_LOST);
  CHECK(peer_state(sender, p1) == 2);
  CHECK(peer_state(sender, p2) < 2);
  CHECK(rail.delivery_complete && sender.t->rails()[0].delivery_complete);
  before = dc_ops();
  auto other = write_batch(sender, p2, la, reinterpret_cast<uint64_t>(buf_two.data()), 4096);
  CHECK(other != nullptr && other->status == te::TE_OK);
  CHECK(buf_two[0] == 0x3c);
  CHECK(dc_ops() == before + 1);
  CHECK(rail.injected_post_errors.load() <= 0);  // both injected errors were consumed by posts
  sender.t->close();
  one.t->close();
  two.t->close();
}

// A batch with requests the provider failed in its own words (a refused posting, an error
// completion te does not classify): reported as such while the peer's connection stands, and
// as CONNECTION_LOST once that connection was lost before the batch settled.
void test_provider_failure_of_a_lost_peer() {
  Node target("reset", 43), sender("resetter", 44);
  CHECK(target.ok && sender.ok);
  if (!target.ok || !sender.ok) return;
  uint64_t peer = open_to(sender, target, 43);
  CHECK(peer != 0);
  std::shared_ptr<Peer> p;
  {
    std::lock_guard<std::mutex> l(sender.m().peers_mu);
    p = sender.m().peers[peer];
  }
  if (!p) return;
  auto crafted = [&](uint64_t id, size_t n) {
    auto b = std::make_shared<Batch>();
    b->id = id;
    b->peer = p;
    b->n = n;
    b->ops.assign(n, 1);
    b->local.assign(n, 0);
    b->remote.assign(n, 0);
    b->lengths.assign(n, 64);
    b->statuses.reset(new std::atomic<int32_t>[n]);
    b->req_left.reset(new std::atomic<uint32_t>[n]);
    for (size_t i = 0; i < n; ++i) {
      b->statuses[i].store(0);
      b->req_left[i].store(1);
    }
    b->slices_left.store(static_cast<int64_t>(n));
    b->dispatched.store(true);
    std::lock_guard<std::mutex> l(sender.m().batches_mu);
    sender.m().batches[id] = b;
    return b;
  };
  // Control: the peer is reachable, the provider's failure is reported as it is.
  auto standing = crafted(555000111, 1);
  sender.m().finish_slice(standing, 0, te::TE_TRANSFER_FAILED, "RMA failed: Unknown error");
  auto out = sender.t->take_batch(standing->id);
  CHECK(out != nullptr);
  if (out) CHECK(out->statuses.size() == 1 && out->statuses[0] == te::TE_TRANSFER_FAILED);
  // The first request fails in the provider's words, then another operation reports the
  // reset connection: the batch settles as the lost connection, for both requests.
  auto b = crafted(555000112, 2);
  sender.m().finish_slice(b, 0, te::TE_TRANSFER_FAILED, "fi_writemsg on sockets: No such file or directory (-2)");
  sender.m().peer_broken(p, "Connection reset by peer");
  sender.m().finish_slice(b, 1, te::TE_CONNECTION_LOST, "RMA failed: Connection reset by peer");
  out = sender.t->take_batch(b->id);
  CHECK(out != nullptr);
  if (out) {
    CHECK(out->statuses.size() == 2);
    for (int32_t st : out->statuses) CHECK(st == te::TE_CONNECTION_LOST);
    CHECK(out->message.find("No such file or directory") !=
          std::string::npos);  // the provider's words stay in the message
  }
  sender.t->close();
  target.t->close();
}

}  // namespace

// notify_test.cpp
void test_notify_budget();
void test_notify_acknowledged();
void test_notify_unanswered();
void test_notify_ack_forged(fabric_test::Node& a, fabric_test::Node& b);
// table_refresh_test.cpp
void test_table_answer_older_than_batch();
// close_race_test.cpp
void test_close_waits_for_an_unregistration();

int main() {
  Node a("a", 7), b("b", 8);
  if (!a.ok || !b.ok) {
    fprintf(stderr, "transport_test: tcp;ofi_rxm unavailable, tests not run\n");
    return 77;
  }
  test_sender_address_of_wrong_length(a, b);
  test_table_without_keys(a, b);
  test_region_without_keys_at_use(a, b);
  test_notify_budget();
  test_answers_bounded(b);
  test_notify_acknowledged();
  test_notify_unanswered();
  test_notify_ack_forged(a, b);
  test_other_version_refused(b);
  test_av_map_bounded();
  test_dead_peer_refused_at_posting();
  test_provider_failure_of_a_lost_peer();
  test_post_error_keeps_delivery_complete();
  test_table_answer_older_than_batch();
  test_close_waits_for_an_unregistration();
  a.t->close();
  b.t->close();
  if (failures)
    fprintf(stderr, "transport_test: %d check(s) failed\n", failures);
  else
    printf("transport_test: ok\n");
  return failures ? 1 : 0;
}
