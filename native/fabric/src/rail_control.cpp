// A rail's queues: slices to post and control messages (hello, tables, revocations,
// notifications), bounded, posted in order per destination.
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include "impl.h"
#include "select.h"

namespace te::fabric {

void Rail::push_slices(std::vector<Slice>&& s) {
  {
    std::lock_guard<std::mutex> l(q_mu);
    for (auto& x : s) slices.push_back(std::move(x));
    count_work();
  }
  wake();
}

bool Rail::push_ctrl(CtrlMsg&& m) {
  {
    std::lock_guard<std::mutex> l(q_mu);
    if (!m.peer) {
      if (!answers.admit(m.bytes.size())) {
        if (fabric_debug()) fprintf(stderr, "[te_fabric rail %d] answer dropped: %zu queued\n", index, answers.count());
        return false;  // peerless messages carry no batch: nothing to fail
      }
    }
    ctrl.push_back(std::move(m));
    count_work();
  }
  wake();
  return true;
}

CtrlMsg Rail::take_ctrl(size_t i) {
  CtrlMsg m = std::move(ctrl[i]);
  ctrl.erase(ctrl.begin() + static_cast<std::ptrdiff_t>(i));
  if (!m.peer) answers.release(m.bytes.size());
  return m;
}

// A control message that will not be sent: the batch it completes fails.
void Rail::drop_ctrl(CtrlMsg&& m, const std::string& why) {
  if (!m.batch) return;
  std::string who = m.peer ? m.peer->name : std::string("?");
  owner->notify_failed(m.batch, TE_CONNECTION_LOST, "notification to \"" + who + "\" " + why);
}

// Posts queued control messages; true when one was posted or dropped. A destination the
// provider cannot take a message for yet (ofi_rxm says "again" while it connects, and
// keeps saying it to a peer that is gone) holds back only later messages to the same
// destination, which stay in order; others go out.
bool Rail::post_ctrl() {
  bool did = false;
  if (queued_ctrl.load() == 0) return false;
  std::vector<fi_addr_t> blocked;
  std::unique_lock<std::mutex> l(q_mu);
  size_t i = 0;
  while (i < ctrl.size() && !free_send.empty()) {
    CtrlMsg& m = ctrl[i];
    std::string why;
    fi_addr_t dest = m.dest;
    if (m.batch && m.batch->done.load()) {
      why = "not sent: its batch ended (cancelled)";  // settled already: nothing to fail
    } else if (now_ms() > m.deadline) {
      why = "could not be sent in time";
    } else if (m.peer && m.peer->state.load() >= 2) {
      std::lock_guard<std::mutex> pl(m.peer->mu);
      why = "not sent: " + (m.peer->broken_reason.empty() ? std::string("the peer was closed") : m.peer->broken_reason);
    } else if (!m.to.empty()) {
      // A message the provider already refused once is not sent to an address forgotten
      // meanwhile (its peer was given up): looking it up anew would bring the entry back.
      dest = m.tried ? lookup_address(m.to) : address_of(m.to, nullptr);
      if (dest == FI_ADDR_NOTAVAIL) why = "not sent: the peer's address was given up";
    }
    if (!why.empty()) {
      CtrlMsg dead = take_ctrl(i);
      l.unlock();
      drop_ctrl(std::move(dead), why);
      l.lock();
      did = true;
      continue;
    }
    if (std::find(blocked.begin(), blocked.end(), dest) != blocked.end()) {
      ++i;
      continue;
    }
    int slot = free_send.back();
    uint8_t* buf = send_buf.data() + static_cast<size_t>(slot) * wire::kMaxMessage;
    size_t n = std::min(m.bytes.size(), wire::kMaxMessage);
    memcpy(buf, m.bytes.data(), n);
    Op* op = new Op();
    op->kind = Op::SEND;
    op->slot = slot;
    op->dest = dest;
    op->batch = m.batch;
    op->peer = m.peer;
    ssize_t rc = fi_send(ep, buf, n, desc_of(send_mr), dest, &op->ctx);
    if (rc == -FI_EAGAIN) {
      delete op;
      m.tried = true;
      blocked.push_back(dest);
      ++i;
      continue;
    }
    free_send.pop_back();
    CtrlMsg sent = take_ctrl(i);
    did = true;
    if (rc) {
      free_send.push_back(slot);
      delete op;
      l.unlock();
      drop_ctrl(std::move(sent), "failed: fi_send: " + fi_error(static_cast<int>(rc)));
      l.lock();
      continue;
    }
    live.insert(op);
  }
  count_work();
  return did;
}

}  // namespace te::fabric
