// One rail: a NIC's fabric, domain, RDM endpoint, completion queue and address vector,
// driven by its own progress thread (providers such as ofi_rxm make progress only when
// their CQ is read, so a target that merely receives still needs this thread). This file:
// opening the rail, its thread's loop and shutdown; rail_addresses.cpp (the address-vector
// cache), rail_control.cpp (the control queue), rail_post.cpp (posting slices) and
// rail_completions.cpp (the completion queue) hold the rest.
#include <poll.h>
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
#include "te/descriptors.h"

namespace te::fabric {

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
  find_wait_fd();
  uint8_t name[512];
  size_t len = sizeof name;
  if ((rc = fi_getname(&ep->fid, name, &len))) return fail("fi_getname", rc);
  pub.addr.assign(name, name + len);
  delivery_complete = owner->opt.delivery_complete;
  pub.delivery_complete = delivery_complete;
  ordered_writes = owner->opt.write_fence && (info->tx_attr->msg_order & (FI_ORDER_WAW | FI_ORDER_RMA_WAW)) != 0;
  max_order_waw = info->ep_attr->max_order_waw_size;
  size_t tx = info->tx_attr->size ? info->tx_attr->size : 256;
  window = static_cast<int>(
      std::min<size_t>(static_cast<size_t>(owner->opt.window), tx > 2 * kSendSlots ? tx - kSendSlots : tx / 2));
  if (window < 1) window = 1;
  max_parts = static_cast<int>(
      std::min<size_t>({static_cast<size_t>(Op::kMaxParts), info->tx_attr->iov_limit ? info->tx_attr->iov_limit : 1,
                        info->tx_attr->rma_iov_limit ? info->tx_attr->rma_iov_limit : 1}));
  if (owner->opt.max_op_parts > 0) max_parts = std::min(max_parts, owner->opt.max_op_parts);

  // Control buffers.
  recv_buf.assign(static_cast<size_t>(kRecvSlots) * wire::kMaxMessage, 0);
  send_buf.assign(static_cast<size_t>(kSendSlots) * wire::kMaxMessage, 0);
  uint64_t k1 = prov_key ? 0 : (0x7e00000000ull | (static_cast<uint64_t>(index) << 8) | 1);
  uint64_t k2 = prov_key ? 0 : (0x7e00000000ull | (static_cast<uint64_t>(index) << 8) | 2);
  if ((rc = fi_mr_reg(domain, recv_buf.data(), recv_buf.size(), FI_RECV, 0, k1, 0, &recv_mr, nullptr)))
    return fail("fi_mr_reg(control recv)", rc);
  if ((rc = fi_mr_reg(domain, send_buf.data(), send_buf.size(), FI_SEND, 0, k2, 0, &send_mr, nullptr)))
    return fail("fi_mr_reg(control send)", rc);
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

// The CQ's wait object as an fd, for sleeping on it directly (sleep_on_wait_fd); a provider
// without one is waited on in fi_cq_sread.
void Rail::find_wait_fd() {
  if (!can_wait) return;
  fi_wait_obj obj = FI_WAIT_NONE;
  int fd = -1;
  if (fi_control(&cq->fid, FI_GETWAITOBJ, &obj) == 0 && obj == FI_WAIT_FD && fi_control(&cq->fid, FI_GETWAIT, &fd) == 0)
    wait_fd = fd;
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

void Rail::run() {
  int idle = 0;
  int64_t last_house = 0;
  int64_t active_at = now_us();  // the last sign of work: a completion, or a wait that moved data
  bool spin_over = false;        // idle_spin_us has passed since active_at: sleep at once when idle
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
      active_at = now_us();
      spin_over = false;
      continue;
    }
    if (fabric_debug()) debug_line();
    if (pending_work.load() > 0) {
      // Operations in flight: keep polling, yielding now and then to the threads that submit.
      if ((++idle & 63) == 63) sched_yield();
      continue;
    }
    // Nothing to do. A provider may still be moving data for this rail's peers without a
    // completion of its own (the target of RMA writes on tcp;ofi_rxm): keep polling for
    // idle_spin_us after the last sign of work, yielding the CPU at every pass, so that data
    // arriving meanwhile needs no wake-up. The clock is read on the first idle pass and every
    // 64th after it; once the window has passed the rail sleeps whenever it is idle, with no
    // further passes: each costs a time slice on a loaded machine, where 64 of them kept a rail
    // with idle_spin_us 0 awake through whole pauses between arrivals.
    if (!spin_over) {
      if ((idle++ & 63) != 0 || now_us() - active_at < owner->opt.idle_spin_us) {
        sched_yield();
        continue;
      }
      spin_over = true;
    }
    idle = 0;
    if (!can_wait) {
      usleep(100);
      continue;
    }
    // Sleep until something happens (wake() ends the sleep); one that ended on activity
    // restarts the polling window.
    sleeping.store(true);
    // Re-checked after `sleeping` is set: a submitter that queued before it saw no sleeper.
    if (pending_work.load() != 0 || stop.load()) {
      sleeping.store(false, std::memory_order_release);
      continue;
    }
    bool moved = wait_fd >= 0 ? sleep_on_wait_fd() : sleep_in_sread();
    sleeping.store(false, std::memory_order_release);
    waits.fetch_add(1, std::memory_order_relaxed);
    if (moved && nap_if_out_of_descriptors()) moved = false;
    if (moved) {
      waits_with_data.fetch_add(1, std::memory_order_relaxed);
      active_at = now_us();
      spin_over = false;
    }
  }
}

// Sleeps on the CQ's wait object itself (an epoll fd), so that the first sign of traffic ends
// the sleep: fi_cq_sread would progress arriving RMA data inside its wait (no completion of
// ours) and go on sleeping, so a long timeout there would keep the rail out of its polling
// window for a whole transfer. fi_trywait progresses the provider and says whether blocking
// is safe; it also clears the wait object's signal, so whatever a wake() before it announced
// is looked for after it (a wake() after it leaves the fd readable). True when the sleep
// ended on activity (data, a connection, a post), false when it ran out: so a sleep that
// timed out while traffic went on is a wake-up lost (the waits counters tell).
bool Rail::sleep_on_wait_fd() {
  fid* f = &cq->fid;
  const int rc = fi_trywait(fabric, &f, 1);
  if (rc == -FI_EAGAIN) return true;  // the provider has something to progress: poll again
  if (rc != 0) {
    // Not supported after all: fi_cq_sread from now on.
    wait_fd = -1;
    return false;
  }
  // A post that came before the sleep; and the timeout is read after trywait, so a request
  // added later wakes the rail.
  if (pending_work.load() != 0 || stop.load()) return true;
  const int timeout = idle_wait_ms();
  pollfd p{wait_fd, POLLIN, 0};
  return ::poll(&p, 1, timeout) > 0;
}

// Sleeps in fi_cq_sread, for providers whose wait object is not an fd. The provider
// progresses inside the wait without returning, so the timeout stays short, and a wait that
// took more than an eighth of its time in CPU counts as one that moved data.
bool Rail::sleep_in_sread() {
  const int64_t cpu0 = thread_cpu_us(), wall0 = now_us();
  const bool got = poll_cq(2);
  return got || (thread_cpu_us() - cpu0) * 8 > now_us() - wall0;
}

// A sleep that ended on "activity" with no completion may be the provider's listener: a
// peer connecting while this process is out of descriptors stays in the backlog, the
// listening socket stays readable, and every progress pass retries the accept (the rail
// then spun a whole CPU, 2.0 s in 2 s). Checked only when a sleep ends on activity (at most
// once per polling window); out of descriptors, the rail naps kDescriptorRetryMs instead of
// polling again, logs the episode once, and true is returned (the sleep moved nothing).
bool Rail::nap_if_out_of_descriptors() {
  if (!te::descriptors_exhausted()) {
    owner->out_of_descriptors.store(false, std::memory_order_relaxed);
    return false;
  }
  if (!owner->out_of_descriptors.exchange(true)) {
    Event e;
    e.kind = Event::LOG;
    e.text =
        "out of file descriptors: connections from peers wait in the backlog until descriptors are freed; "
        "raise the limit (ulimit -n)";
    owner->sink(std::move(e));
  }
  ::poll(nullptr, 0, te::kDescriptorRetryMs);
  return true;
}

// How long an idle rail sleeps on its wait fd. Data arriving, a connection and a post (wake())
// end the sleep at once; the timeout is only for what the rail does on a clock: rail 0 times
// out requests that wait for an answer (housekeeping, every 5 ms), and every rail retires
// forgotten addresses after their grace (scanned every 50 ms). With neither, an idle rail
// wakes once a second.
int Rail::idle_wait_ms() {
  if (index == 0 && owner->has_pending()) return 2;
  if (has_retiring.load(std::memory_order_acquire)) return 50;
  return 1000;
}

void Rail::debug_line() {
  static thread_local int64_t last = 0;
  int64_t t = now_ms();
  if (t - last <= 1000) return;
  last = t;
  std::lock_guard<std::mutex> l(q_mu);
  fprintf(stderr, "[te_fabric rail %d %s] inflight=%d slices=%zu ctrl=%zu free_send=%zu\n", index,
          owner->opt.segment_name.c_str(), inflight, slices.size(), ctrl.size(), free_send.size());
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
    if (op->kind == Op::DATA && op->write && op->batch)
      op->batch->remote_unconfirmed.store(true, std::memory_order_release);
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
