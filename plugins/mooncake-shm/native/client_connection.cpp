// Initiator side of mooncake-shm: the connection to one target (see client.h): connecting
// with HELLO, its reply, and reading the target's messages (completions) until it closes.
#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "client.h"
#include "client_peer.h"

namespace teshm {

void Client::connect_locked(Peer& p) {
  std::string err;
  Status s = connect_abstract(p.socket_name, opt_.connect_timeout_ms, &p.fd, &err);
  if (s == te::TE_OK) s = create_control_page(&p.ctl_fd, &p.page, &err);
  PeerCred cred;
  if (s == te::TE_OK && (!peer_cred(p.fd, &cred) || cred.uid != geteuid())) {
    // Whoever holds the abstract name must be this user's process, or it gets nothing.
    s = te::TE_AUTH_FAILED;
    err = "the process listening on @" + p.socket_name + " runs as uid " + std::to_string(cred.uid) + ", not " +
          std::to_string(geteuid());
  }
  if (s == te::TE_OK) {
    p.pidfd = open_pidfd(cred.pid);
    Hello h;
    h.expected_epoch = p.epoch;
    h.probe_addr = reinterpret_cast<uint64_t>(p.nonce);
    std::memcpy(h.nonce, p.nonce, sizeof h.nonce);
    h.name = opt_.segment_name;
    std::vector<uint8_t> msg;
    encode_hello(h, &msg);
    if (send_message(p.fd, msg, p.ctl_fd) < 0) {
      s = te::TE_PEER_UNREACHABLE;
      err = std::string("sending HELLO: ") + std::strerror(errno);
    }
  }
  if (s != te::TE_OK) {
    fail_locked(p, s, err);
    return;
  }
  p.state = Peer::HELLO_SENT;
  by_fd_[p.fd] = peers_[p.id];
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = p.fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, p.fd, &ev);
}

void Client::on_reply_locked(Peer& p, const HelloReply& r) {
  if (r.status != te::TE_OK) {
    fail_locked(p, r.status, "target " + p.label() + " refused the connection: " + r.message);
    return;
  }
  p.state = Peer::OPEN;
  p.window = r.max_outstanding == 0 ? 1 : r.max_outstanding;
  if (!p.open_reported) {
    p.open_reported = true;  // a reconnect reports nothing: its batches were waiting for it
    owner_->emit(Event{Event::OPEN, p.id, 0, "", {}});
  }
  flush_locked(p);
}

void Client::read_peer_locked(const std::shared_ptr<Peer>& pp) {
  Peer& p = *pp;
  std::vector<uint8_t> buf;
  Message m;
  for (int budget = 0; budget < 256 && p.fd >= 0; ++budget) {
    int got_fd = -1;
    bool truncated = false;
    ssize_t r = recv_message(p.fd, &buf, &got_fd, &truncated);
    if (got_fd >= 0) close(got_fd);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (r <= 0) {
      // End of stream: the target exited or let go of the connection after its last copy,
      // so nothing touches this process's memory for it any more.
      bool exited = pidfd_exited(p.pidfd);
      std::string why = p.state == Peer::HELLO_SENT
                            ? "target " + p.label() + " closed the connection during the handshake"
                        : exited ? "target " + p.label() + " exited with requests in flight"
                                 : "target " + p.label() + " closed the connection";
      if (p.state == Peer::REVOKING) return fail_locked(p, p.revoke_status, p.revoke_msg);
      return fail_locked(p, p.state == Peer::HELLO_SENT ? te::TE_PEER_UNREACHABLE : te::TE_CONNECTION_LOST, why);
    }
    std::string why;
    Status s = truncated ? te::TE_BAD_FRAME : parse_message(buf.data(), buf.size(), &m, &why);
    bool expected = s == te::TE_OK && ((p.state == Peer::HELLO_SENT && m.type == HELLO_REPLY) ||
                                       (p.state != Peer::HELLO_SENT && m.type == COMPLETIONS));
    if (!expected) {
      // A target that speaks nonsense may still be copying: fence it before failing anything.
      return revoke_locked(
          p, te::TE_BAD_FRAME,
          "target " + p.label() + " sent a malformed message: " + (why.empty() ? "unexpected type" : why));
    }
    if (m.type == HELLO_REPLY) {
      on_reply_locked(p, m.reply);
      continue;
    }
    for (const Completion& c : m.completions) {
      Pending q;
      if (!p.inflight.take(c.seq, &q)) continue;  // already failed locally (cancel) or unknown
      complete_locked(p, q.batch, q.index, c.status);
    }
    flush_locked(p);
  }
}

}  // namespace teshm
