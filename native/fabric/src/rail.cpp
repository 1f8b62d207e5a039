// One rail: a NIC's fabric, domain, RDM endpoint, completion queue and address vector,
// driven by its own progress thread (providers such as ofi_rxm make progress only when
// their CQ is read, so a target that merely receives still needs this thread).
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <algorithm>
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

int32_t status_of_post_error(int err) {
  if (err < 0) err = -err;
  // The sockets provider connects on the first operation to an address, and again after a
  // connection dropped; when that connect fails (nothing listens there any more: the peer's
  // process is gone) the posting is refused with FI_ENOENT, "no connection to that address".
  if (err == FI_ENOENT) return TE_CONNECTION_LOST;
  // A connection error refused at posting means what it means in a completion. Anything
  // else (a key or argument the provider rejects before sending) stays a failed transfer:
  // nothing was exchanged with the peer to say which.
  return status_of_cq_error(err) == TE_CONNECTION_LOST ? TE_CONNECTION_LOST : TE_TRANSFER_FAILED;
}

Status Rail::open(std::string* err) {
  auto fail = [&](const char* what, int rc) {
    *err = std::string(what) + " failed on " + pub.provider + "/" + pub.domain + ": " + fi_error(rc);
    return TE_PROVIDER_UNAVAILABLE;
  };
  pub.provider = info->fabric_attr->prov_name ? info->fabric_attr->prov_name : "";
  pub.fabric = info->fabric_attr->name ? info->fabric_attr->name : "";
  pub.domain = info->domain_attr->name ? info->domain_attr->name : "";
  pub.mr_mode = static_cast<uint64_t>(info->domain_attr->mr_mode);
  pub.virt_addr = (info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0;
  pub.key_size = info->domain_attr->mr_key_size;
  pub.max_msg_size = info->ep_attr->max_msg_size;
  pub.inject_size = info->tx_attr->inject_size;
  mr_local = (info->domain_attr->mr_mode & FI_MR_LOCAL) != 0;
  mr_endpoint = (info->domain_attr->mr_mode & FI_MR_ENDPOINT) != 0;
  prov_key = (info->domain_attr->mr_mode & FI_MR_PROV_KEY) != 0;
  int rc;
  if ((rc = fi_fabric(info->fabric_attr, &fabric, nullptr))) return fail("fi_fabric", rc);
  if ((rc = fi_domain(fabric, info, &domain, nullptr))) return fail("fi_domain", rc);
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_MSG;
  cq_attr.wait_obj = FI_WAIT_UNSPEC;
  cq_attr.size = 0;
  if (fi_cq_open(domain, &cq_attr, &cq, nullptr)) {
    cq_attr.wait_obj = FI_WAIT_NONE;
    can_wait = false;
    if ((rc = fi_cq_open(domain, &cq_attr, &cq, nullptr))) return fail("fi_cq_open", rc);
  }
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_UNSPEC;
  if ((rc = fi_av_open(domain, &av_attr, &av, nullptr))) return fail("fi_av_open", rc);
  if ((rc = fi_endpoint(domain, info, &ep, nullptr))) return fail("fi_endpoint", rc);
  if ((rc = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV))) return fail("fi_ep_bind(cq)", rc);
  if ((rc = fi_ep_bind(ep, &av->fid, 0))) return fail("fi_ep_bind(av)", rc);
  if ((rc = fi_enable(ep))) return fail("fi_enable", rc);
  uint8_t name[512];
  size_t len = sizeof name;
  if ((rc = fi_getname(&ep->fid, name, &len))) return fail("fi_getname", rc);
  pub.addr.assign(name, name + len);
  delivery_complete = owner->opt.delivery_complete;
  pub.delivery_complete = delivery_complete;
  ordered_writes = owner->opt.write_fence && (info->tx_attr->msg_order & (FI_ORDER_WAW | FI_ORDER_RMA_WAW)) != 0;
  max_order_waw = info->ep_attr->max_order_waw_size;
  size_t tx = info->tx_attr->size ? info->tx_attr->size : 256;
  window = static_cast<int>(std::min<size_t>(static_cast<size_t>(owner->opt.window), tx > 2 * kSendSlots ? tx - kSendSlots : tx / 2));
  if (window < 1) window = 1;
  max_parts = static_cast<int>(std::min<size_t>({static_cast<size_t>(Op::kMaxParts), info->tx_attr->iov_limit ? info->tx_attr->iov_limit : 1,
                                                 info->tx_attr->rma_iov_limit ? info->tx_attr->rma_iov_limit : 1}));
  if (owner->opt.max_op_parts > 0) max_parts = std::min(max_parts, owner->opt.max_op_parts);

  // Control buffers.
  recv_buf.assign(static_cast<size_t>(kRecvSlots) * wire::kMaxMessage, 0);
  send_buf.assign(static_cast<size_t>(kSendSlots) * wire::kMaxMessage, 0);
  uint64_t k1 = prov_key ? 0 : (0x7e00000000ull | (static_cast<uint64_t>(index) << 8) | 1);
  uint64_t k2 = prov_key ? 0 : (0x7e00000000ull | (static_cast<uint64_t>(index) << 8) | 2);
  if ((rc = fi_mr_reg(domain, recv_buf.data(), recv_buf.size(), FI_RECV, 0, k1, 0, &recv_mr, nullptr))) return fail("fi_mr_reg(control recv)", rc);
  if ((rc = fi_mr_reg(domain, send_buf.data(), send_buf.size(), FI_SEND, 0, k2, 0, &send_mr, nullptr))) return fail("fi_mr_reg(control send)", rc);
  if (mr_endpoint) {
    for (fid_mr* m : {recv_mr, send_mr}) {
      if ((rc = fi_mr_bind(m, &ep->fid, 0)) || (rc = fi_mr_enable(m))) return fail("fi_mr_bind(control)", rc);
    }
  }
  for (int i = 0; i < kSendSlots; ++i) free_send.push_back(i);
  for (int i = 0; i < kRecvSlots; ++i) {
    Op* op = new Op();
    op->kind = Op::RECV;
    op->slot = i;
    live.insert(op);
    rc = fi_recv(ep, recv_buf.data() + static_cast<size_t>(i) * wire::kMaxMessage, wire::kMaxMessage, desc_of(recv_mr),
                 FI_ADDR_UNSPEC, &op->ctx);
    if (rc) return fail("fi_recv", rc);
  }
  return TE_OK;
}

void Rail::start_thread() {
  thread = std::thread([this] {
    pthread_setname_np(pthread_self(), ("te-fi-rail" + std::to_string(index)).c_str());
    run();
  });
}

void Rail::wake() {
  if (sleeping.load() && can_wait) fi_cq_signal(cq);
}

fi_addr_t Rail::address_of(const std::vector<uint8_t>& raw, std::string* err) {
  std::unique_lock<std::mutex> l(av_mu);
  auto it = av_map.find(raw);
  if (it != av_map.end()) {
    av_lru.splice(av_lru.begin(), av_lru, it->second.lru);  // most recently used
    return it->second.fa;
  }
  // fi_av_insert reads the provider's fixed address length from `raw`: an address of another
  // length (a peer's message may name any) is refused before the provider sees it.
  if (!address_fits(raw)) {
    if (err) *err = "refused a " + std::to_string(raw.size()) + "-byte address on " + pub.provider + "/" + pub.domain +
                    " (its addresses are " + std::to_string(pub.addr.size()) + " bytes)";
    return FI_ADDR_NOTAVAIL;
  }
  // At the bound, the entries peers opened here use stay (senders we only answer go first).
  // Their set is read without av_mu (peers_mu is never taken inside it elsewhere), before the
  // insert: the insert and the eviction then happen under one hold of av_mu, so no other
  // thread ever sees the map past its bound.
  std::set<fi_addr_t> pinned;
  if (av_map.size() >= max_av_entries) {
    l.unlock();
    pinned = owner->addresses_in_use(index);
    l.lock();
    auto again = av_map.find(raw);
    if (again != av_map.end()) {  // inserted by another thread meanwhile
      av_lru.splice(av_lru.begin(), av_lru, again->second.lru);
      return again->second.fa;
    }
  }
  fi_addr_t fa = FI_ADDR_NOTAVAIL;
  int rc = fi_av_insert(av, raw.data(), 1, &fa, 0, nullptr);
  if (rc != 1) {
    if (err) *err = "fi_av_insert failed on " + pub.provider + "/" + pub.domain + ": " + fi_error(rc < 0 ? rc : -FI_EINVAL);
    return FI_ADDR_NOTAVAIL;
  }
  av_lru.push_front(raw);
  av_map[raw] = AvEntry{fa, av_lru.begin()};
  if (av_map.size() > max_av_entries) evict_addresses(fa, pinned);
  return fa;
}

void Rail::evict_addresses(fi_addr_t keep, const std::set<fi_addr_t>& pinned) {
  // Evicted entries retire at the next scan: no grace, as nothing resolved them lately (they
  // are the least recently used); retire_addresses still keeps any a message or operation uses.
  const int64_t due = now_ms() - kRetireGraceMs;
  auto it = av_lru.end();
  while (av_map.size() > max_av_entries && it != av_lru.begin()) {
    --it;
    auto e = av_map.find(*it);
    if (e == av_map.end()) {  // (cannot happen: the list holds the map's keys)
      it = av_lru.erase(it);
      continue;
    }
    if (e->second.fa == keep || pinned.count(e->second.fa)) continue;
    retiring.emplace(e->second.fa, due);
    av_map.erase(e);
    it = av_lru.erase(it);
    has_retiring.store(true, std::memory_order_release);
  }
}

bool Rail::address_fits(const std::vector<uint8_t>& raw) const {
  if (raw.empty() || raw.size() != pub.addr.size()) return false;
  // Socket addresses: the provider sizes them by their family, so it must be this rail's.
  const uint32_t fmt = info ? info->addr_format : 0;
  if ((fmt == FI_SOCKADDR_IN || fmt == FI_SOCKADDR_IN6) && raw.size() >= 2 && memcmp(raw.data(), pub.addr.data(), 2) != 0) return false;
  return true;
}

fi_addr_t Rail::lookup_address(const std::vector<uint8_t>& raw) {
  std::lock_guard<std::mutex> l(av_mu);
  auto it = av_map.find(raw);
  return it == av_map.end() ? FI_ADDR_NOTAVAIL : it->second.fa;
}

void Rail::forget_address(const std::vector<uint8_t>& raw) {
  // Removing the entry makes providers with connections under the AV (ofi_rxm) drop the
  // broken connection, so the next insert of the address builds a new one. The removal
  // itself waits for the rail thread (retire_addresses): the address may still be in use.
  std::lock_guard<std::mutex> l(av_mu);
  auto it = av_map.find(raw);
  if (it == av_map.end()) return;
  retiring.emplace(it->second.fa, now_ms());
  av_lru.erase(it->second.lru);
  av_map.erase(it);
  has_retiring.store(true, std::memory_order_release);
}

void Rail::retire_addresses() {
  if (!has_retiring.load(std::memory_order_acquire)) return;
  const int64_t t = now_ms();
  if (t - last_retire_scan < 50) return;
  last_retire_scan = t;
  std::vector<fi_addr_t> due;
  {
    std::lock_guard<std::mutex> l(av_mu);
    std::set<fi_addr_t> mapped;
    for (auto& [raw, e] : av_map) mapped.insert(e.fa);
    for (auto it = retiring.begin(); it != retiring.end();) {
      // Inserted again meanwhile (a provider may hand out the same entry): in use again,
      // and retired anew when it is forgotten again.
      if (mapped.count(it->first)) {
        it = retiring.erase(it);
        continue;
      }
      if (t - it->second >= kRetireGraceMs) due.push_back(it->first);
      ++it;
    }
  }
  if (!due.empty()) {
    // What messages, operations and open peers use, gathered once for every due entry.
    std::set<fi_addr_t> used = owner->addresses_in_use(index);
    {
      std::lock_guard<std::mutex> l(q_mu);
      for (const CtrlMsg& m : ctrl)
        if (m.to.empty()) used.insert(m.dest);
      for (const Op* op : live)
        if (op->kind != Op::RECV) used.insert(op->dest);
    }
    // Removed under av_mu, so no insert of the same address runs meanwhile; one inserted
    // again since the scan above is mapped again and stays.
    std::lock_guard<std::mutex> l(av_mu);
    std::set<fi_addr_t> mapped;
    for (auto& [raw, e] : av_map) mapped.insert(e.fa);
    for (fi_addr_t fa : due) {
      if (mapped.count(fa)) {
        retiring.erase(fa);
        continue;
      }
      if (used.count(fa) || !retiring.count(fa)) continue;
      fi_av_remove(av, &fa, 1, 0);
      retiring.erase(fa);
    }
  }
  std::lock_guard<std::mutex> l(av_mu);
  has_retiring.store(!retiring.empty(), std::memory_order_release);
}

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
      if (answers >= kMaxAnswers || answer_bytes + m.bytes.size() > kMaxAnswerBytes) {
        if (getenv("TE_FABRIC_DEBUG")) fprintf(stderr, "[te_fabric rail %d] answer dropped: %zu queued\n", index, answers);
        return false;  // peerless messages carry no batch: nothing to fail
      }
      ++answers;
      answer_bytes += m.bytes.size();
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
  if (!m.peer) {
    --answers;
    answer_bytes -= m.bytes.size();
  }
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

// Posts queued control messages and slices; true when something was posted or failed.
bool Rail::post_some() {
  bool did = post_ctrl();
  // Slices are taken from the queue in chunks and posted without the queue lock: callers
  // queue more (push_slices, from the JS thread) while this thread is in the provider.
  // Their places in the window are reserved while they are out of the queue.
  for (;;) {
    if (queued_slices.load() == 0) return did;
    std::deque<Slice> chunk;
    {
      std::lock_guard<std::mutex> ql(q_mu);
      size_t room = inflight < window ? static_cast<size_t>(window - inflight) : 0;
      size_t take = std::min<size_t>({room, slices.size(), kPostChunk});
      for (size_t i = 0; i < take; ++i) {
        chunk.push_back(std::move(slices.front()));
        slices.pop_front();
      }
      inflight += static_cast<int>(take);
      count_work();
    }
    if (chunk.empty()) return did;
    std::vector<Op*> posted;
    posted.reserve(chunk.size());
    int merged = 0;
    const bool full = post_chunk(chunk, posted, merged);
    did = true;  // posted, finished or refused: something moved
    {
      std::lock_guard<std::mutex> ql(q_mu);
      for (Op* op : posted) live.insert(op);
      // What was not posted (the provider was full) goes back to the front, in order; a
      // place is an operation, so slices that shared one give theirs back.
      inflight -= static_cast<int>(chunk.size()) + merged;
      while (!chunk.empty()) {
        slices.push_front(std::move(chunk.back()));
        chunk.pop_back();
      }
      count_work();
    }
    if (full) return true;
  }
}

// Checks, at posting time, what may have changed since the batch was validated: the batch
// ended or was cancelled, the peer broke, the peer revoked the region (re-checked under the
// peer's lock and counted into the region, so a revocation waits for the operation), local
// memory was unregistered. Refusals hold nothing; `why` is empty where the status says it all.
int32_t Rail::admit(const Slice& s, Lease& lease, std::string& why) {
  const std::shared_ptr<Batch>& b = s.batch;
  const std::shared_ptr<Peer>& peer = b->peer;
  int32_t cancel = b->cancel_status.load();
  if (cancel) return cancel;
  if (b->done.load()) return TE_ABORTED;
  if (peer->state.load() >= 2) {
    std::lock_guard<std::mutex> pl(peer->mu);
    why = peer->broken_reason;
    return TE_CONNECTION_LOST;
  }
  {
    std::lock_guard<std::mutex> pl(peer->mu);
    auto it = peer->regions.find(s.region);
    if (it == peer->regions.end() || std::find(it->second.keys.begin(), it->second.keys.end(), s.key) == it->second.keys.end()) {
      why = "the peer revoked the region while the batch was queued";
      return TE_MEMORY_NOT_REGISTERED;
    }
    ++peer->posted[s.region];
  }
  Status ls = owner->registry.acquire(s.local, s.len, false, lease);
  if (ls != TE_OK) {
    owner->drained(peer, s.region);
    why = "local memory was unregistered while the batch was queued";
    return ls;
  }
  return TE_OK;
}

// Posts the slices of `chunk` in order, without the queue lock (their window places are
// reserved). Consecutive slices of one batch to one peer region, in one direction, go out
// as one scatter-gather operation where the provider allows several iovs (tcp;ofi_rxm: 4),
// which divides the provider's per-operation cost (a message and a syscall on tcp) among
// them. Failed or refused slices are finished (and their places given back); posted ops are
// added to `posted`; on a full provider the rest stays in `chunk` and the result is true.
// The caller returns what stayed to the queue.
bool Rail::post_chunk(std::deque<Slice>& chunk, std::vector<Op*>& posted, int& merged) {
  auto give_back_place = [this] {
    std::lock_guard<std::mutex> ql(q_mu);
    --inflight;
    count_work();
  };
  const uint64_t group_bytes = owner->opt.slice_size;
  while (!chunk.empty()) {
    Op* op = new Op();
    op->kind = Op::DATA;
    {
      Slice& s = chunk.front();
      std::string why;
      int32_t st = admit(s, op->parts[0].lease, why);
      if (st != TE_OK) {
        Slice x = std::move(s);
        chunk.pop_front();
        delete op;
        give_back_place();
        if (x.fence) fence_dropped(x, st, why);
        owner->finish_slice(x.batch, x.req, st, why);
        continue;
      }
    }
    // What the group shares, copied: the slices are moved out of `chunk` once posted.
    const bool write = chunk.front().write;
    const uint64_t region = chunk.front().region, key = chunk.front().key;
    op->batch = chunk.front().batch;
    op->peer = op->batch->peer;
    op->dest = op->peer->dest[static_cast<size_t>(index)];
    op->write = write;
    iovec iov[Op::kMaxParts];
    void* desc[Op::kMaxParts];
    fi_rma_iov riov[Op::kMaxParts];
    uint64_t total = 0;
    bool fence = false;
    size_t n = 0;
    for (;;) {
      const Slice& s = chunk[n];
      OpPart& part = op->parts[n];
      part.req = s.req;
      part.len = s.len;
      part.region = s.region;
      iov[n] = iovec{reinterpret_cast<void*>(s.local), s.len};
      desc[n] = mr_local ? owner->local_desc(index, s.local) : nullptr;
      riov[n] = fi_rma_iov{s.raddr, s.len, s.key};
      total += s.len;
      fence = fence || (s.write && s.fence);
      ++n;
      if (fence || n >= static_cast<size_t>(max_parts) || n >= chunk.size()) break;
      const Slice& t = chunk[n];
      // Same batch, direction and region only: one op has one outcome, and a revoked region
      // must fail only the requests that targeted it.
      if (t.batch != op->batch || t.write != write || t.region != region || t.key != key ||
          total + t.len > group_bytes)
        break;
      // The fence goes out within the ordered size, else its delivery proves nothing.
      if (t.write && t.fence && total + t.len > max_order_waw) break;
      std::string ignored;
      if (admit(t, op->parts[n].lease, ignored) != TE_OK) break;  // refused on its own turn
    }
    op->nparts = static_cast<int>(n);
    fi_msg_rma msg{};
    msg.msg_iov = iov;
    msg.desc = desc;
    msg.iov_count = n;
    msg.addr = op->dest;
    msg.rma_iov = riov;
    msg.rma_iov_count = n;
    msg.context = &op->ctx;
    // A write is posted plainly when a later write of its batch (the fence) proves it.
    const bool dc = delivery_complete;
    const bool plain = write && !fence && dc && ordered_writes && total <= max_order_waw;
    uint64_t flags = FI_COMPLETION;
    if (write && dc && !plain) flags |= FI_DELIVERY_COMPLETE;
    // A refused post fails this operation only (below); it is never retried with weaker
    // flags: a write that completes once sent would be reported as applied.
    ssize_t rc = injected_post_error();
    if (rc == 0) rc = write ? fi_writemsg(ep, &msg, flags) : fi_readmsg(ep, &msg, flags);
    if (rc == -FI_EAGAIN) {
      std::shared_ptr<Peer> peer = op->peer;
      delete op;  // releases the leases
      for (size_t i = 0; i < n; ++i) owner->drained(peer, chunk[i].region);  // counted again when posted again
      return true;
    }
    if (rc) {
      std::string why = std::string(write ? "fi_writemsg" : "fi_readmsg") + " on " + pub.provider + ": " + fi_error(static_cast<int>(rc));
      if (rc == -FI_ENOENT) why += " (no connection to the peer, and none could be made)";
      if ((flags & FI_DELIVERY_COMPLETE) && (rc == -FI_EBADFLAGS || rc == -FI_EOPNOTSUPP || rc == -FI_ENOSYS))
        why += " (the provider refuses FI_DELIVERY_COMPLETE writes: set deliveryComplete: false to accept writes complete once sent)";
      std::shared_ptr<Peer> peer = op->peer;
      delete op;
      // A peer the provider can no longer reach is broken, as when a completion says so:
      // what is queued to it is refused at admission, without posting (and reconnecting) again.
      const int32_t st = status_of_post_error(static_cast<int>(rc));
      if (st == TE_CONNECTION_LOST && peer) owner->peer_broken(peer, why);
      for (size_t i = 0; i < n; ++i) {
        Slice x = std::move(chunk.front());
        chunk.pop_front();
        give_back_place();
        owner->drained(peer, x.region);
        if (x.fence) fence_dropped(x, st, why);
        owner->finish_slice(x.batch, x.req, st, why);
      }
      continue;
    }
    for (size_t i = 0; i < n; ++i) chunk.pop_front();
    merged += static_cast<int>(n) - 1;
    rma_ops.fetch_add(1, std::memory_order_relaxed);
    rma_slices.fetch_add(n, std::memory_order_relaxed);
    if (flags & FI_DELIVERY_COMPLETE) rma_delivery_complete_ops.fetch_add(1, std::memory_order_relaxed);
    op->plain_write = plain;
    op->fence = fence;
    if (plain) fences.posted_plain(op->batch.get());
    posted.push_back(op);
  }
  return false;
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
  std::string msg = std::string(fi_strerror(e.err)) + (ps && *ps ? std::string(" (provider ") + pub.provider + ": " + ps + ")" : "");
  if (getenv("TE_FABRIC_DEBUG")) fprintf(stderr, "[te_fabric rail %d] cq error %d %s op=%p kind=%d\n", index, e.err, msg.c_str(), (void*)op, op ? op->kind : -1);
  if (!op) return;
  {
    std::lock_guard<std::mutex> l(q_mu);
    live.erase(op);
  }
  int32_t st = status_of_cq_error(e.err);
  switch (op->kind) {
    case Op::RECV:
      {
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
        owner->fail_hellos(op->peer, TE_PEER_UNREACHABLE, "cannot reach \"" + op->peer->name + "\" on rail " + std::to_string(index) + ": " + msg);
      }
      if (op->batch)
        owner->notify_failed(op->batch, st == TE_MEMORY_NOT_REGISTERED ? TE_TRANSFER_FAILED : st,
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

void Rail::run() {
  int idle = 0;
  int64_t last_house = 0;
  while (!stop.load(std::memory_order_acquire)) {
    bool did = post_some();
    did = poll_cq(-1) || did;
    retire_addresses();
    if (index == 0) {
      int64_t t = now_ms();
      if (t - last_house >= 5) {
        last_house = t;
        owner->housekeeping();
      }
    }
    if (did) {
      idle = 0;
      continue;
    }
    const bool busy = pending_work.load() > 0;
    static const bool debug = getenv("TE_FABRIC_DEBUG") != nullptr;
    if (debug) {
      static thread_local int64_t last = 0;
      int64_t t = now_ms();
      if (t - last > 1000) {
        last = t;
        std::lock_guard<std::mutex> l(q_mu);
        fprintf(stderr, "[te_fabric rail %d %s] inflight=%d slices=%zu ctrl=%zu free_send=%zu\n", index, owner->opt.segment_name.c_str(), inflight, slices.size(), ctrl.size(), free_send.size());
      }
    }
    if (busy || ++idle < 2000) {
      if ((idle & 63) == 63) sched_yield();
      continue;
    }
    // Idle: sleep on the CQ's wait object (fi_cq_signal wakes it), else nap.
    if (can_wait) {
      sleeping.store(true);
      // Re-checked after `sleeping` is set: a submitter that queued before it saw no sleeper.
      if (pending_work.load() == 0 && !stop.load()) poll_cq(2);
      sleeping.store(false, std::memory_order_release);
    } else {
      usleep(100);
    }
    idle = 1000;  // after a wake-up, spin a little before sleeping again
  }
}

void Rail::shutdown() {
  stop.store(true);
  if (thread.joinable()) {
    if (can_wait && cq) fi_cq_signal(cq);
    thread.join();
  }
  if (ep) fi_close(&ep->fid);
  ep = nullptr;
  // Writes posted and not reported, or not proven delivered (held for a fence): closing the
  // endpoint abandons them, but what the provider already handed to the network may still
  // reach the peer, and nothing is left to ask. Their batches say so as they settle.
  const auto abandon = [](Op* op) {
    if (op->kind == Op::DATA && op->write && op->batch) op->batch->remote_unconfirmed.store(true, std::memory_order_release);
    delete op;
  };
  for (Op* op : live) abandon(op);
  live.clear();
  for (Op* op : fences.drain_all()) abandon(op);
  if (recv_mr) fi_close(&recv_mr->fid);
  if (send_mr) fi_close(&send_mr->fid);
  recv_mr = send_mr = nullptr;
}

}  // namespace te::fabric
