// Target connection: its lifecycle (creation, ticks, close), epoll interest and events, and
// the check that its initiator still holds it.
#include "server_conn.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "te/epoch.h"

namespace tetcp {

namespace {
// The receive buffer is freed once the connection has been idle this long.
constexpr int64_t kReleaseIdleMs = 1000;
}  // namespace

ServerConn::ServerConn(Transport* t, Loop* loop, int fd, std::string address)
    : t_(t), loop_(loop), fd_(fd), address_(std::move(address)) {
  last_active_ = now_ms();
  deadline_ = last_active_ + t_->options().handshake_timeout_ms;
  interest_ = EPOLLIN;
  loop_->add(fd_, interest_, this);
}

ServerConn::~ServerConn() {
  if (fd_ >= 0) ::close(fd_);
}

void ServerConn::drop(const std::string& why) {
  if (closed) return;
  (void)why;  // the initiator reports the failure; the target keeps serving others
  closed = true;
  // Listed until a running device copy is done (the job unlists it): a REVOKE waits for it.
  if (served_ && !rx_copies_->running) t_->served().remove(client_nonce_, rx_copies_.get());
  loop_->remove(fd_, this);
  ::close(fd_);
  fd_ = -1;
  t_->connection_closed(address_);
  loop_->retire(this, true);
}

void ServerConn::on_shutdown() { drop("transport closed"); }

void ServerConn::on_tick(int64_t now) {
  if (state_ != READY && now > deadline_) {
    drop("handshake timed out");
    return;
  }
  if (active_) {
    active_ = false;
    last_active_ = now;
    return;
  }
  // Idle: no byte moved either way (an initiator closes its idle lanes at half this time).
  if (now - last_active_ > t_->options().idle_timeout_ms) {
    drop("idle");
    return;
  }
  if (now - last_active_ > kReleaseIdleMs) {
    rbuf_.release();
    row_bounce_.reset();
  }
}

void ServerConn::set_interest() {
  if (closed) return;
  uint32_t want = (input_held() || close_after_flush_ ? 0u : uint32_t(EPOLLIN)) | (want_out_ ? uint32_t(EPOLLOUT) : 0u);
  if (want != interest_) {
    interest_ = want;
    loop_->modify(fd_, want, this);
  }
}

void ServerConn::on_event(uint32_t events) {
  if (events & (EPOLLERR | EPOLLHUP)) {
    // Let recv report it (may still hold data); EPOLLHUP alone with no data is a close.
    events |= EPOLLIN;
  }
  if ((rx_busy_ || awaiting_revoke_) && (events & (EPOLLERR | EPOLLHUP))) {
    // Input is paused for a device copy or a revocation but the socket failed (reported
    // whatever the interest): drop now rather than spin until the copy or answer is done.
    drop(rx_busy_ ? "connection failed during a device copy" : "connection failed while a revocation was confirmed");
    return;
  }
  if ((events & EPOLLIN) && !input_held() && !close_after_flush_) read_input();
  if (!closed) flush();
}

// A WRITE is applied (and a NOTIFY delivered) only while its initiator still holds the
// connection. An initiator closes it before it settles a cancelled batch, so bytes still
// queued here (a stopped or slow target) never land after the batch settled. TCP reports
// the close (FIN: CLOSE_WAIT, RST: CLOSE) before the bytes queued ahead of it are read.
// Asked once per received chunk, only when something is about to be applied.
bool ServerConn::initiator_connected() {
  if (revoked_) liveness_ = GONE;
  if (liveness_ == UNKNOWN) {
    tcp_info ti{};
    socklen_t len = sizeof ti;
    bool up = getsockopt(fd_, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 && ti.tcpi_state == TCP_ESTABLISHED;
    liveness_ = up ? CONNECTED : GONE;
  }
  if (liveness_ == CONNECTED) return true;
  drop("the initiator closed the connection; its unapplied requests are discarded");
  return false;
}

}  // namespace tetcp
