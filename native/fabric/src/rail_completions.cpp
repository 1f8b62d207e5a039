// A rail's completion queue: reading it, turning provider errors into statuses, and
// finishing the operations (data, control, fence) it reports.
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

int32_t status_of_cq_error(int err) {
  switch (err) {
    case FI_ECONNRESET:
    case FI_ECONNREFUSED:
    case FI_ENOTCONN:
    case FI_ECONNABORTED:
    case FI_EHOSTUNREACH:
    case FI_ENETUNREACH:
    case FI_ETIMEDOUT:
    case EPIPE:
    case FI_EIO:
    case FI_EHOSTDOWN:
    case FI_ENETDOWN:
    case FI_ESHUTDOWN:
    case FI_ECANCELED:  // te never cancels posted RMA: the provider dropped the connection
      return TE_CONNECTION_LOST;
    case FI_EACCES:
    case FI_EKEYREJECTED:
    case FI_EPERM:
    case FI_EINVAL:
      return TE_MEMORY_NOT_REGISTERED;
    default:
      return TE_TRANSFER_FAILED;
  }
}

void Rail::repost_recv(Op* op) {
  if (stop.load()) return;
  ssize_t rc;
  do {
    rc = fi_recv(ep, recv_buf.data() + static_cast<size_t>(op->slot) * wire::kMaxMessage, wire::kMaxMessage,
                 desc_of(recv_mr), FI_ADDR_UNSPEC, &op->ctx);
    if (rc == -FI_EAGAIN) fi_cq_read(cq, nullptr, 0);
  } while (rc == -FI_EAGAIN && !stop.load());
}

void Rail::handle_error() {
  fi_cq_err_entry e{};
  if (fi_cq_readerr(cq, &e, 0) != 1) return;
  Op* op = static_cast<Op*>(e.op_context);
  char buf[256] = {0};
  const char* ps = fi_cq_strerror(cq, e.prov_errno, e.err_data, buf, sizeof buf);
  std::string msg =
      std::string(fi_strerror(e.err)) + (ps && *ps ? std::string(" (provider ") + pub.provider + ": " + ps + ")" : "");
  if (fabric_debug())
    fprintf(stderr, "[te_fabric rail %d] cq error %d %s op=%p kind=%d\n", index, e.err, msg.c_str(), (void*)op,
            op ? op->kind : -1);
  if (!op) return;
  {
    std::lock_guard<std::mutex> l(q_mu);
    live.erase(op);
  }
  int32_t st = status_of_cq_error(e.err);
  switch (op->kind) {
    case Op::RECV: {
      std::lock_guard<std::mutex> l(q_mu);
      live.insert(op);
    }
      repost_recv(op);
      return;
    case Op::SEND: {
      {
        std::lock_guard<std::mutex> l(q_mu);
        free_send.push_back(op->slot);
      }
      if (op->peer && st == TE_CONNECTION_LOST) {
        owner->peer_broken(op->peer, "control message failed: " + msg);
        owner->fail_hellos(op->peer, TE_PEER_UNREACHABLE,
                           "cannot reach \"" + op->peer->name + "\" on rail " + std::to_string(index) + ": " + msg);
      }
      if (op->batch)
        owner->notify_failed(
            op->batch, st == TE_MEMORY_NOT_REGISTERED ? TE_TRANSFER_FAILED : st,
            "notification to \"" + (op->peer ? op->peer->name : std::string("?")) + "\" failed: " + msg);
      delete op;
      return;
    }
    case Op::DATA: {
      {
        std::lock_guard<std::mutex> l(q_mu);
        --inflight;
        count_work();
      }
      std::string who = op->peer ? op->peer->name : std::string("?");
      if (st == TE_CONNECTION_LOST && op->peer) owner->peer_broken(op->peer, msg);
      if (st == TE_MEMORY_NOT_REGISTERED && op->peer) {
        // The peer refused the key or range: forget its table so the next batch re-reads it.
        std::lock_guard<std::mutex> pl(op->peer->mu);
        op->peer->regions.clear();
      }
      data_finished(op, st, "RMA to \"" + who + "\" failed: " + msg);
      return;
    }
  }
}

bool Rail::poll_cq(int timeout_ms) {
  fi_cq_msg_entry ent[16];
  ssize_t n = timeout_ms < 0 ? fi_cq_read(cq, ent, 16) : fi_cq_sread(cq, ent, 16, nullptr, timeout_ms);
  if (n == -FI_ENOSYS || n == -FI_EOPNOTSUPP) {
    can_wait = false;
    return false;
  }
  if (n == -FI_EAVAIL) {
    handle_error();
    return true;
  }
  if (n <= 0) return false;
  Op* data[16];
  size_t ndata = 0;
  for (ssize_t i = 0; i < n; ++i) {
    Op* op = static_cast<Op*>(ent[i].op_context);
    if (!op) continue;
    switch (op->kind) {
      case Op::RECV:
        owner->on_message(*this, recv_buf.data() + static_cast<size_t>(op->slot) * wire::kMaxMessage, ent[i].len);
        repost_recv(op);
        break;
      case Op::SEND: {
        {
          std::lock_guard<std::mutex> l(q_mu);
          free_send.push_back(op->slot);
          live.erase(op);
        }
        // A NOTIFY's batch waits for the receiver's NOTIFY_ACK (messages.cpp), not for this.
        delete op;
        break;
      }
      case Op::DATA:
        data[ndata++] = op;
        break;
    }
  }
  if (ndata == 0) return true;
  // One lock for every data completion of this read (the queue lock is what submitters wait for).
  {
    std::lock_guard<std::mutex> l(q_mu);
    inflight -= static_cast<int>(ndata);
    for (size_t i = 0; i < ndata; ++i) live.erase(data[i]);
    count_work();
  }
  for (size_t i = 0; i < ndata; ++i) data_finished(data[i], TE_OK, "");
  return true;
}

void Rail::finish_op(Op* op, int32_t status, const std::string& why) {
  auto b = op->batch;
  auto p = op->peer;
  const int n = op->nparts;
  uint32_t req[Op::kMaxParts];
  uint64_t region[Op::kMaxParts];
  for (int i = 0; i < n; ++i) {
    req[i] = op->parts[i].req;
    region[i] = op->parts[i].region;
  }
  delete op;  // releases the leases
  for (int i = 0; i < n; ++i) {
    if (p) owner->drained(p, region[i]);
    owner->finish_slice(b, req[i], status, why);
  }
}

void Rail::data_finished(Op* op, int32_t status, const std::string& why) {
  if (op->plain_write) {
    // Held writes keep their lease and their count in the region: a revocation waits for
    // them until their delivery is proven.
    WriteFences::Outcome o = fences.plain_done(op, op->batch.get(), status);
    if (o.held) return;
    finish_op(op, o.status, status != 0 ? why : o.why);
    return;
  }
  if (op->fence) {
    std::vector<std::pair<Op*, WriteFences::Outcome>> released;
    fences.fence_done(op->batch.get(), status, why, released);
    for (auto& [held, o] : released) finish_op(held, o.status, o.why);
  }
  finish_op(op, status, why);
}

void Rail::fence_dropped(const Slice& s, int32_t status, const std::string& why) {
  std::vector<std::pair<Op*, WriteFences::Outcome>> released;
  fences.fence_done(s.batch.get(), status, why, released);
  for (auto& [held, o] : released) finish_op(held, o.status, o.why);
}

}  // namespace te::fabric
