// The fabric transport's region-table refresh: a batch whose remote range is missing from
// the cached table waits for a table request sent after it was submitted, never for the
// answer to an older one.
#include "transport_test_node.h"

using namespace te::fabric;
using namespace fabric_test;

namespace {

// The table requests in flight for `peer` on `n`, by request id.
std::vector<uint64_t> table_requests(Node& n, uint64_t peer) {
  std::vector<uint64_t> ids;
  std::lock_guard<std::mutex> l(n.m().pending_mu);
  for (auto& [id, pd] : n.m().pending)
    if (pd.kind == Pending::TABLE && pd.peer && pd.peer->id == peer) ids.push_back(id);
  return ids;
}

}  // namespace

// A table answer older than the batch waiting for it. A write whose region the target
// registered after the initiator's table request went out (that request sent for a batch
// aborted against a stalled target) joined that request, and its answer, which predates the
// registration, failed the write with MEMORY_NOT_REGISTERED (seen in the conformance suite's
// "abort: in flight, against a stalled peer" on the sockets provider). Such a batch now
// waits for a request sent after it.
void test_table_answer_older_than_batch() {
  Node sender("tbl-sender", 71), target("tbl-target", 72);
  CHECK(sender.ok && target.ok);
  if (!sender.ok || !target.ok) return;
  static std::vector<uint8_t> first(64 * 1024, 0), second(64 * 1024, 0), local(64 * 1024, 0x77);
  std::string err;
  std::vector<uint64_t> lkeys;
  uint64_t lbase = 0;
  const uint64_t la = reinterpret_cast<uint64_t>(local.data());
  CHECK(sender.t->register_memory(la, local.size(), false, &lkeys, &lbase, &err) == te::TE_OK);
  const uint64_t peer = open_with_region(sender, target, 72, first);
  CHECK(peer != 0);
  if (peer == 0) return;
  std::shared_ptr<Peer> p;
  {
    std::lock_guard<std::mutex> l(sender.m().peers_mu);
    p = sender.m().peers[peer];
  }
  // The target stops answering; what the sender sends it stays queued.
  target.stop_rail_thread();
  const uint64_t ra2 = reinterpret_cast<uint64_t>(second.data()), len = 4096;
  uint8_t op = 1;
  // A write into memory the target has not registered yet: the sender asks for its table.
  uint64_t aborted = 0;
  size_t batches = sender.count(Event::BATCH);
  CHECK(sender.t->submit(peer, &op, &la, &ra2, &len, 1, nullptr, 0, &aborted, &err) == te::TE_OK);
  const std::vector<uint64_t> before = table_requests(sender, peer);
  CHECK(before.size() == 1);
  if (before.size() != 1) return;
  sender.t->cancel(aborted, te::TE_ABORTED);
  CHECK(sender.wait_for(Event::BATCH, batches + 1));
  sender.t->take_batch(aborted);
  // Now the target registers it, and the application writes there.
  std::vector<uint64_t> keys2;
  uint64_t base2 = 0;
  CHECK(target.t->register_memory(ra2, second.size(), true, &keys2, &base2, &err) == te::TE_OK);
  uint64_t waiting = 0;
  batches = sender.count(Event::BATCH);
  CHECK(sender.t->submit(peer, &op, &la, &ra2, &len, 1, nullptr, 0, &waiting, &err) == te::TE_OK);
  // The old request is answered with the table as it was before that registration.
  std::vector<uint64_t> first_keys;
  uint64_t first_base = 0;
  {
    std::lock_guard<std::mutex> l(p->mu);
    first_keys = p->regions.begin()->second.keys;
    first_base = p->regions.begin()->second.base;
  }
  std::vector<uint8_t> body;
  wire::put_u16(body, static_cast<uint16_t>(first_keys.size()));
  wire::put_u32(body, 1);
  wire::put_u64(body, reinterpret_cast<uint64_t>(first.data()));
  wire::put_u64(body, first.size());
  wire::put_u64(body, first_base);
  for (uint64_t k : first_keys) wire::put_u64(body, k);
  deliver(sender, message(wire::TABLE, target.rail().pub.addr, 71, before[0], body, wire::kLast));
  // The write was not failed with that answer (it would have settled here, on this thread):
  // it waits for a new request, sent after the answer.
  CHECK(sender.count(Event::BATCH) == batches);
  const std::vector<uint64_t> after = table_requests(sender, peer);
  CHECK(after.size() == 1 && after[0] != before[0]);
  {
    std::lock_guard<std::mutex> l(p->mu);
    CHECK(p->parked.size() == 1 && p->parked_next.empty());
  }
  // Cancelled while it waits, it settles at once: nothing of it was posted.
  sender.t->cancel(waiting, te::TE_ABORTED);
  CHECK(sender.wait_for(Event::BATCH, batches + 1));
  auto out = sender.t->take_batch(waiting);
  CHECK(out != nullptr && out->status == te::TE_ABORTED);
  sender.t->close();
  target.t->close();
}
