// Target connection: the requests of a ready connection. WRITE and READ are validated
// against this process's registered remote-accessible memory before any byte is touched;
// NOTIFY is delivered to the application; REVOKE closes another connection of the same
// initiator before it is answered.
#include <memory>

#include "server_conn.h"

namespace tetcp {

// The whole request (span) must lie in one remote-accessible region, and the slice in it.
int32_t ServerConn::validate(uint64_t addr, uint64_t len, uint64_t span_addr, uint64_t span_len) const {
  const bool spanned = span_len != 0;
  if (!spanned) span_addr = addr, span_len = len;
  if (spanned && (te::range_overflows(addr, len) || !te::range_within(span_addr, span_len, addr, len)))
    return te::TE_INVALID_ARGUMENT;
  return t_->registry().check(span_addr, span_len, true);
}

bool ServerConn::on_request_header(const Header& h) {
  switch (h.op) {
    case OP_WRITE:
      return on_write_header(h);
    case OP_WRITEV:
      return on_writev_header(h);
    case OP_WRITE_ROWS:
      return on_rows_header(h);
    case OP_READ: {
      if (h.length > kMaxBody) {
        drop("READ length too large");
        return false;
      }
      int32_t s = validate(h);
      if (s == te::TE_OK) {
        respond(h, te::TE_OK, h.addr, h.length);
        if (h.length) out_.back().device = t_->devices().device_of(h.addr);
      } else {
        respond(h, s);
      }
      return true;
    }
    case OP_NOTIFY:
      if (h.length > kMaxControlBody) {
        drop("NOTIFY too large");
        return false;
      }
      start_body(CTRL, 0);
      return !closed;
    case OP_REVOKE:
      if (h.length != kNonceSize) {
        drop("bad REVOKE");
        return false;
      }
      start_body(CTRL, 0);
      return !closed;
    default:
      drop("unknown op");
      return false;
  }
}

bool ServerConn::on_write_header(const Header& h) {
  if (h.length > kMaxBody) {
    drop("WRITE body too large");
    return false;
  }
  start_write_body(h.addr, h.length, validate(h));
  return !closed;
}

void ServerConn::start_write_body(uint64_t addr, uint64_t len, int32_t s) {
  body_status_ = s;
  start_digest(s);
  int device = s == te::TE_OK ? t_->devices().device_of(addr) : kHost;
  if (device != kHost && len) {
    // Device region: receive into pinned staging, copy to the device, then acknowledge.
    if (!rx_stage_) rx_stage_ = std::make_shared<Stager>(t_->staging_bytes(), t_->staging_backend());
    std::string why;
    te::Status st = te::TE_OK;
    if (rx_stage_->buffer(&st, &why)) {
      stage_device_ = device;
      stage_dst_ = addr;
      stage_fill_ = 0;
      start_body(STAGED, addr, len);
      return;
    }
    body_status_ = st;
    s = st;
  }
  start_body(s == te::TE_OK ? DIRECT : DRAIN, addr, len);
}

// A request's body is in: a WRITE is acknowledged with what became of it, a REVOKE starts,
// a NOTIFY is delivered.
void ServerConn::finish_request() {
  if (cur_.op == OP_WRITE) {
    respond_write(cur_, body_status_);
  } else if (cur_.op == OP_WRITEV) {
    finish_writev_part();
  } else if (cur_.op == OP_WRITE_ROWS) {
    if (rows_table_)
      on_rows_table();
    else
      respond_write(cur_, body_status_);
  } else if (cur_.op == OP_REVOKE) {
    start_revoke(cur_);
  } else if (cur_.op == OP_NOTIFY) {
    if (!initiator_connected()) return;
    // Acknowledged only once queued; a full queue refuses it (the sender's batch fails).
    respond(cur_, t_->deliver_notification(peer_name_, std::vector<uint8_t>(ctrl_body_.begin(), ctrl_body_.end())));
  }
}

// The named connection is closed on its own loop; the answer goes out once that happened
// (and any device copy from it finished), so a connection this one revokes applies nothing
// after the initiator read the answer. Until then this connection reads no further request:
// responses on a connection keep their order.
void ServerConn::start_revoke(const Header& h) {
  ServedConnection named;
  if (!t_->served().find(ctrl_body_.data(), &named)) {
    respond(h, te::TE_OK);  // not listed (any more): it is closed, nothing of it is applied
    return;
  }
  // (By its copies, not its address: a destroyed connection's address may be this one's.)
  if (named.copies == rx_copies_ || named.peer != peer_name_) {
    // Only the initiator that opened a connection may revoke it, and not over itself.
    respond(h, te::TE_INVALID_ARGUMENT);
    return;
  }
  awaiting_revoke_ = true;
  set_interest();
  Loop* back = loop_;
  named.loop->post([named, back, self = this, self_alive = std::weak_ptr<bool>(alive_), h] {
    auto confirm = [back, self, self_alive, h] {
      back->post([self, self_alive, h] {
        if (!self_alive.expired()) self->on_revoke_confirmed(h, te::TE_OK);
      });
    };
    if (!named.alive.expired()) {
      named.conn->revoke(std::move(confirm));
      return;
    }
    // Destroyed, but a device copy of its bytes may still run.
    if (named.copies->running)
      named.copies->waiters.push_back(std::move(confirm));
    else
      confirm();
  });
}

void ServerConn::revoke(std::function<void()> confirmed) {
  revoked_ = true;  // applies nothing more (if still open; closed applies nothing anyway)
  if (rx_copies_->running) {
    // A worker is copying received bytes into device memory: confirmed when it is done
    // (on_stage_flushed then closes the connection).
    rx_copies_->waiters.push_back(std::move(confirmed));
    return;
  }
  drop("revoked by its initiator");
  confirmed();
}

void ServerConn::on_revoke_confirmed(const Header& h, int32_t status) {
  awaiting_revoke_ = false;
  if (closed) return;
  respond(h, status);
  set_interest();
  liveness_ = UNKNOWN;  // time passed: asked afresh before the next chunk is applied
  if (parse()) read_input();
  if (!closed) flush();
}

}  // namespace tetcp
