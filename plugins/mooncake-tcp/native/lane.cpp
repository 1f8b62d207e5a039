// Lane: queueing from any thread, the connection's lifecycle (failure, reset after a
// cancel, idle close) and the loop callbacks. Connecting, sending and receiving live in
// lane_handshake.cpp, lane_send.cpp and lane_receive.cpp.
#include "lane.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tetcp {

Lane::Lane(Peer* peer, Loop* loop, uint32_t index) : peer_(peer), loop_(loop), index_(index) {}

Lane::~Lane() {
  if (fd_ >= 0) ::close(fd_);
}

void Lane::post_pump() {
  {
    std::lock_guard<std::mutex> lock(qmu_);
    if (pump_posted_) return;
    pump_posted_ = true;
  }
  // The task keeps the peer (and so this lane) alive until it ran.
  loop_->post([this, keep = peer_->shared_from_this()] { pump(); });
}

void Lane::enqueue(Slice* s) { enqueue(&s, 1); }

void Lane::enqueue(Slice* const* s, size_t n) {
  {
    std::lock_guard<std::mutex> lock(qmu_);
    incoming_.insert(incoming_.end(), s, s + n);
  }
  post_pump();
}

void Lane::open() {
  {
    std::lock_guard<std::mutex> lock(qmu_);
    open_requested_ = true;
  }
  post_pump();
}

void Lane::sweep() { post_pump(); }

void Lane::shut(int32_t status, const std::string& why) {
  loop_->post([this, status, why, keep = peer_->shared_from_this()] {
    fail(status, why);
    closed = true;
    loop_->retire(this, false);
  });
}

void Lane::pump() {
  bool open_req;
  {
    std::lock_guard<std::mutex> lock(qmu_);
    pump_posted_ = false;
    for (Slice* s : incoming_) pending_.push_back(s);
    incoming_.clear();
    open_req = open_requested_;
    open_requested_ = false;
  }
  if (closed || loop_->stopping()) {
    fail(te::TE_ABORTED, "transport closed");
    return;
  }
  if (open_req) {
    if (state_ == READY) {
      peer_->lane_opened(te::TE_OK, "");
    } else {
      reporting_open_ = true;
    }
  }
  fail_cancelled_pending();
  if (state_ == IDLE && (!pending_.empty() || reporting_open_ || !revoking_.empty())) start_connect();
  if (state_ == READY) {
    refill();
    flush();
  }
}

// Cancelled slices that were never sent fail right away.
void Lane::fail_cancelled_pending() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if ((*it)->batch->cancelled()) {
      Slice* s = *it;
      it = pending_.erase(it);
      settle(s, s->batch->cancel_status.load(), nullptr);
    } else {
      ++it;
    }
  }
}

void Lane::close_connection() {
  if (fd_ >= 0) {
    // Abortive close (RST): a FIN would queue behind the bytes not yet sent, so the target
    // would still see an open connection while it reads them; an RST discards them and
    // tells the target at once that nothing more it reads from here may be applied.
    linger off{1, 0};
    setsockopt(fd_, SOL_SOCKET, SO_LINGER, &off, sizeof off);
    loop_->remove(fd_, this);
    ::close(fd_);
    fd_ = -1;
  }
  state_ = IDLE;
  want_out_ = false;
  interest_ = 0;
  ctrl_out_.clear();
  ctrl_off_ = 0;
  rbuf_.clear();
  rbuf_.release();  // a lane without a connection holds no receive buffer
  in_body_ = false;
  body_staged_ = false;
  body_statuses_ = false;
  body_ctrl_ = false;
  body_why_.clear();
  tx_staged_id_ = 0;
  tx_index_ = 0;
  tx_off_ = 0;
  pack_slice_ = nullptr;
  inflight_bytes_ = 0;
}

void Lane::fail(int32_t status, const std::string& why, bool sticky) {
  if (sticky) peer_->set_sticky(status, why);
  // WRITEs sent and not answered: unless the target itself dropped the connection (then it
  // applies nothing more from it), this side gives up on them (closing, a peer closed, a
  // target that broke the protocol), and the reset travels behind bytes already on their
  // way. No REVOKE follows: their batches say the bytes may still land. CONNECTION_LOST
  // raised by this side (a source unregistered mid-send) marks them before it fails.
  if (status != te::TE_CONNECTION_LOST) mark_sent_unconfirmed();
  close_connection();
  if (reporting_open_) {
    reporting_open_ = false;
    peer_->lane_opened(status, why);
  }
  if (!revoking_.empty())
    settle_revoking("the connection to confirm that nothing more of it lands failed (" + why +
                    "): bytes already on their way may still have landed");
  std::deque<Slice*> victims;
  victims.swap(inflight_);
  for (Slice* s : pending_) victims.push_back(s);
  pending_.clear();
  {
    std::lock_guard<std::mutex> lock(qmu_);
    for (Slice* s : incoming_) victims.push_back(s);
    incoming_.clear();
  }
  for (Slice* s : victims) settle(s, status, why.c_str());
}

// A cancelled batch's slices were not answered within the grace time. The connection is
// reset, so the target discards what it has not read yet (it applies nothing from a
// connection its initiator closed). Bytes already on their way are not stopped by the
// reset, which travels behind them: the cancelled slices settle only once the target has
// confirmed, over a fresh connection (REVOKE, see wire.h), that nothing more from the reset
// one will be applied. Slices of other batches on this connection did nothing wrong: they
// are sent again, in order, on that fresh connection (WRITE and READ are idempotent).
void Lane::drop_for_cancel(int64_t grace) {
  read_input();         // answers that already arrived complete their slices first
  if (fd_ < 0) return;  // the connection failed meanwhile (and with it its slices)
  std::vector<Slice*> cancelled;
  std::deque<Slice*> resend;
  for (Slice* s : inflight_) (s->batch->cancelled() ? cancelled.push_back(s) : resend.push_back(s));
  inflight_.clear();
  if (!revoking_.empty())
    settle_revoking("a later reset overtook its confirmation");  // not reached: READY settles them first
  std::memcpy(revoke_nonce_, client_nonce_, kNonceSize);
  const bool confirmable = peer_revokes_;
  close_connection();
  while (!resend.empty()) {
    pending_.push_front(resend.back());
    resend.pop_back();
  }
  revoke_why_ = "peer " + peer_->label() + " did not answer within " + std::to_string(grace) +
                " ms of the cancel; its connection was reset";
  revoke_deadline_ = now_ms() + grace;
  if (confirmable) {
    revoking_.assign(cancelled.begin(), cancelled.end());
  } else {
    const std::string why =
        revoke_why_ +
        " before the batch settled (this peer cannot confirm that bytes already on their way were discarded)";
    for (Slice* s : cancelled) {
      mark_unconfirmed(s);
      settle(s, s->batch->cancel_status.load(), why.c_str());
    }
  }
  fail_cancelled_pending();
  if ((!pending_.empty() || !revoking_.empty()) && fd_ < 0 && !closed) start_connect();
}

void Lane::settle_revoking(const std::string& how, bool confirmed) {
  std::vector<Slice*> done;
  done.swap(revoking_);
  const std::string why = revoke_why_ + "; " + how;
  for (Slice* s : done) {
    if (!confirmed) mark_unconfirmed(s);
    settle(s, s->batch->cancel_status.load(), why.c_str());
  }
}

void Lane::mark_sent_unconfirmed() {
  // inflight_ holds the slices refill() took, sent or not: the first tx_index_ went out
  // whole, the next one in part when tx_off_ > 0.
  for (size_t i = 0; i < inflight_.size(); ++i)
    if (i < tx_index_ || (i == tx_index_ && tx_off_ > 0)) mark_unconfirmed(inflight_[i]);
}

void Lane::mark_unconfirmed(Slice* s) {
  // Before the settle: the batch's last settle hands it to the JS thread.
  if (s->op == OP_WRITE) s->batch->remote_unconfirmed.store(true, std::memory_order_release);
}

void Lane::set_interest() {
  if (fd_ < 0) return;
  // While a worker copies rx staging to the device, nothing more is read (the next READ
  // body would land in the same buffer).
  uint32_t want = (rx_job_ ? 0u : uint32_t(EPOLLIN)) | (want_out_ || state_ == CONNECTING ? uint32_t(EPOLLOUT) : 0u);
  if (want != interest_) {
    interest_ = want;
    loop_->modify(fd_, want, this);
  }
}

void Lane::on_event(uint32_t events) {
  if (state_ == CONNECTING) {
    if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) on_connected();
    return;
  }
  if (rx_job_ && (events & (EPOLLERR | EPOLLHUP))) {
    // Input is paused but the socket failed (epoll reports that whatever the interest):
    // fail now rather than spin until the copy is done.
    fail(te::TE_CONNECTION_LOST, "connection to " + peer_->label() + " failed");
    return;
  }
  if ((events & (EPOLLIN | EPOLLERR | EPOLLHUP)) && !rx_job_) read_input();
  if (fd_ >= 0 && (events & EPOLLOUT)) {
    if (state_ == READY) refill();
    flush();
  }
}

void Lane::on_tick(int64_t now) {
  if (!revoking_.empty() && now > revoke_deadline_) {
    // A stopped or unreachable peer cannot confirm; the batch does not wait longer than the
    // grace time again. Its kernel has most likely seen the reset by now (it went out before
    // the new connection's SYN), and a target applies nothing it reads after that.
    settle_revoking("the peer did not confirm within " + std::to_string(peer_->owner->options().cancel_grace_ms) +
                    " ms that nothing more of it is applied: bytes already on their way may still land");
  }
  // Idle lanes close at half the idle timeout, before a target (same setting) closes them
  // and races a request just being sent; the next slice connects again.
  if (state_ == READY && inflight_.empty() && pending_.empty() && ctrl_out_.empty() &&
      now - last_used_ > peer_->owner->options().idle_timeout_ms / 2) {
    close_connection();
    return;
  }
  if ((state_ == CONNECTING || state_ == HELLO || state_ == AUTH || state_ == REVOKE) && now > deadline_) {
    fail(te::TE_PEER_UNREACHABLE, std::string(state_ == REVOKE ? "confirming a cancel with " : "connecting to ") +
                                      peer_->label() + " timed out after " +
                                      std::to_string(peer_->owner->options().connect_timeout_ms) + " ms");
    return;
  }
  if (state_ == READY && !inflight_.empty()) {
    const int64_t grace = peer_->owner->options().cancel_grace_ms;
    for (Slice* s : inflight_) {
      Batch* b = s->batch;
      if (b->cancelled() && now - b->cancel_at.load() > grace) {
        drop_for_cancel(grace);
        return;
      }
    }
  }
}

void Lane::on_shutdown() {
  fail(te::TE_ABORTED, "transport closed");
  closed = true;
  loop_->retire(this, false);
}

}  // namespace tetcp
