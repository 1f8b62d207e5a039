// One client connection ("lane") to a peer. Slices are queued from any thread and sent
// pipelined on the loop thread (header + body in one writev, body straight from
// registered memory); responses come back in order and complete the slices.
#pragma once

#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "recv_buffer.h"
#include "te/digest.h"
#include "transport.h"

namespace tetcp {

/** A verified write's bytes are digested this many at a time, just before the send copies them. */
constexpr uint64_t kDigestPiece = 256 * 1024;

class Lane : public IoHandler {
 public:
  Lane(Peer* peer, Loop* loop, uint32_t index);
  ~Lane() override;
  /** Any thread: queue a slice; the loop connects if needed and sends it. */
  void enqueue(Slice* s);
  /** Any thread: queue `n` slices in order, under one lock and with at most one wake-up. */
  void enqueue(Slice* const* s, size_t n);
  /** Any thread: connect now (openPeer); reports to Peer::lane_opened. */
  void open();
  /** Any thread: fail queued slices of cancelled batches; close if needed. */
  void sweep();
  /** Any thread: close and fail everything with `status` (closePeer). */
  void shut(int32_t status, const std::string& why);

  void on_event(uint32_t events) override;
  void on_tick(int64_t now) override;
  void on_shutdown() override;

 private:
  // REVOKE: handshake done, the REVOKE for the connection reset by a cancel awaits its answer.
  enum State { IDLE, CONNECTING, HELLO, AUTH, REVOKE, READY };
  void post_pump();
  void pump();
  void start_connect();
  void on_connected();
  /** Closes the socket and forgets the connection's state; slices stay where they are. */
  void close_connection();
  void fail_cancelled_pending();
  void fail(int32_t status, const std::string& why, bool sticky = false);
  void drop_for_cancel(int64_t grace);
  void refill();
  /** How many of pending_'s front slices can ride in a WRITEV frame behind `s` (0: none; see wire.h). */
  size_t writev_run(const Slice* s, uint64_t window) const;
  /** Moves `s` and the `run` pending slices behind it into the window as one WRITEV frame. */
  void start_writev(Slice* s, size_t run);
  /** Moves scattered-write slice `s` into the window as a WRITE_ROWS frame (its row table after the header). */
  void start_rows(Slice* s, const StridedRows& rows);
  /** Writes control bytes, then the unsent frames of inflight_, until done or the socket is full. */
  void flush();
  /**
   * Appends the unsent frames of inflight_ (from tx_index_, tx_off_ bytes of it written) to
   * `iov`, starting a device slice's staging copy where one is due; false when the lane failed.
   */
  bool gather_frames(iovec* iov, size_t* n, std::vector<te::Lease>* leases);
  /**
   * Appends the iovec for narrow rows of gathered slice `s` from body byte `body_skip`: the
   * packed buffer, refilled unless it already holds that byte (a send that took part of it).
   */
  void append_packed(const Slice* s, const StridedRows& rows, uint64_t body_skip, iovec* iov, size_t* n);
  /** Packs body bytes from `body_skip` of narrow rows into pack_, unless it holds them already. */
  void pack_rows(const Slice* s, const StridedRows& rows, uint64_t body_skip);
  /**
   * A verified write (lane_digest.cpp): digests the next piece of its body when everything
   * digested so far was sent (`body_skip` there), adding the bytes to `fresh`. False (and the
   * lane failed) when the digest cannot go on. The caller offers bytes up to s->digest_at.
   */
  bool digest_ahead(Slice* s, const StridedRows* rows, bool staged, uint64_t body_skip, uint64_t* fresh);
  /** The status of a verified write whose target answered OK with `digest`: OK or DATA_CORRUPTED. */
  int32_t check_digest(const Slice* s, uint64_t digest) const;
  /** Takes a lease on WRITE slice `s`'s local range (its rows' span when it gathers `rows`) unless one in `leases`
   * covers it; false: unregistered. */
  bool lease_body(const Slice* s, const StridedRows* rows, std::vector<te::Lease>* leases);
  /** `written` bytes went out: first the `ctrl_left` control bytes, then inflight_'s frames. */
  void account_sent(uint64_t written, size_t ctrl_left);
  /** Receives what the socket holds, then sets the receive mark (recv_buffer.h). */
  void read_input();
  void read_available();
  bool header_only() const;
  bool parse();
  /** A frame header arrived (buffered bytes parsed); false when the lane failed. */
  bool on_header(const Header& h);
  /** on_header in HELLO or AUTH: the handshake answer's body is collected as a control body. */
  bool on_handshake_header(const Header& h);
  /** on_header for a successful answer to READ slice `s` (the front one): its body follows. */
  bool on_read_answer(const Header& h, Slice* s);
  /** on_header for the answer to WRITEV frame `s` (the front one): its statuses may follow. */
  bool on_writev_answer(const Header& h, Slice* s);
  /** The READ body of `length` bytes for device memory goes to rx staging (or is drained if it cannot). */
  void stage_read_body(uint64_t length);
  void finish_body();
  void on_handshake_answer();
  void finish_staged_body();
  void complete_front(int32_t status, const char* why = nullptr);
  /** The message of a request the target answered with `status`. */
  static std::string refusal(const Slice* s, int32_t status);
  /** The answer to the front WRITEV frame: its slices complete, each with `statuses[i]` (or all with `status`). */
  void complete_frame(int32_t status, const uint8_t* statuses, const uint8_t* digests = nullptr);
  /** The front slice leaves the window and completes (no refill). */
  void pop_front_slice(int32_t status, const char* why);
  void set_interest();
  void send_ctrl(const Header& h, const uint8_t* body, size_t len);
  /** The handshake is done: a pending revocation goes first, then the lane is ready. */
  void handshake_done();
  /** The target answered the REVOKE with `status`: the revoked slices settle, the lane is ready. */
  void on_revoke_answer(int32_t status);
  void reached_ready();
  /**
   * Settles the slices whose connection was reset after a cancel; `how` says whether the
   * peer confirmed. Unconfirmed WRITEs mark their batch: their bytes may still land.
   */
  void settle_revoking(const std::string& how, bool confirmed = false);
  /** A WRITE slice settles while its bytes, already sent, may still land at the peer. */
  static void mark_unconfirmed(Slice* s);
  /** Marks the WRITEs of inflight_ that were sent, whole or in part, on the connection being given up. */
  void mark_sent_unconfirmed();
  /** Worker thread: copies device slice `s` into `stager` (the tx staging buffer). */
  static te::Status stage_write(Transport* owner, Stager* stager, Slice* s, std::string* why);
  /** Hands the copy of device slice `s` (at tx_index_, nothing of it sent) to a worker. */
  void start_tx_stage(Slice* s, uint64_t id);
  /** Loop thread: the tx staging copy of `s` (frame `id`) finished with `status`. */
  void on_tx_staged(Slice* s, uint64_t id, int32_t status, const std::string& why);
  /** Hands the copy of the front READ's body (in rx staging) to the device to a worker. */
  void start_rx_unstage(Slice* s);
  /** Loop thread: the rx copy of `s` finished: completes it and resumes reading. */
  void on_rx_unstaged(Slice* s, int32_t status, const std::string& why);
  /**
   * Completes `s` with `status`, or, when a worker is still copying from its memory, records
   * the status and completes it when the copy is done: a slice settles only once nothing
   * touches its memory any more.
   */
  void settle(Slice* s, int32_t status, const char* why);

  Peer* peer_;
  Loop* loop_;
  uint32_t index_;
  std::mutex qmu_;
  std::vector<Slice*> incoming_;
  bool pump_posted_ = false;
  bool open_requested_ = false;

  // Loop-thread state.
  State state_ = IDLE;
  int fd_ = -1;
  bool reporting_open_ = false;
  int64_t deadline_ = 0;
  int64_t last_used_ = 0;  // last slice sent or answered (idle lanes close)
  uint32_t interest_ = 0;
  bool want_out_ = false;
  std::deque<Slice*> pending_;
  std::deque<Slice*> inflight_;
  size_t tx_index_ = 0;  // first in-flight slice not fully written
  uint64_t tx_off_ = 0;  // bytes of that slice's frame already written
  uint64_t inflight_bytes_ = 0;
  uint64_t next_id_ = 1;
  std::vector<uint8_t> ctrl_out_;
  size_t ctrl_off_ = 0;
  RecvBuffer rbuf_;
  bool in_body_ = false;
  Header cur_;
  uint64_t body_left_ = 0;
  int lowat_ = 1;  // the socket's SO_RCVLOWAT, as last set (a new socket's: 1)
  uint64_t body_dst_ = 0;
  bool body_drain_ = false;
  bool body_ctrl_ = false;
  int32_t body_status_ = 0;
  std::vector<uint8_t> ctrl_body_;
  uint8_t client_nonce_[kNonceSize];
  uint8_t server_nonce_[kNonceSize];
  uint64_t server_epoch_ = 0;
  bool peer_revokes_ = false;   // the target answers REVOKE (HELLO_ACK feature)
  bool peer_writev_ = false;    // the target takes WRITEV frames (HELLO_ACK feature)
  bool peer_rows_ = false;      // the target takes WRITE_ROWS frames (HELLO_ACK feature)
  bool peer_digest_ = false;    // the target answers verified writes with digests (HELLO_ACK feature)
  bool body_statuses_ = false;  // the body being received: a WRITEV answer's per-segment statuses
  // Slices of cancelled batches whose connection was reset: they settle once the target
  // confirmed (REVOKE on the next connection) that nothing more from it is applied.
  std::vector<Slice*> revoking_;
  uint8_t revoke_nonce_[kNonceSize];  // the reset connection's HELLO nonce
  std::string revoke_why_;            // what happened to them, for their settle message
  int64_t revoke_deadline_ = 0;       // they settle unconfirmed after this (cancelGraceMs after the reset)
  // CUDA staging (device memory only; allocated on first use, freed with the lane). The copies
  // between a staging buffer and the device run on the transport's workers, one per
  // direction at a time; the lane (kept alive by the job) resumes when the copy posts back.
  std::unique_ptr<Stager> tx_stage_;  // WRITE bodies: device -> pinned, then sent
  std::unique_ptr<Stager> rx_stage_;  // READ bodies: received into pinned, then -> device
  // Gathered writes of narrow rows: packed here before the send (kRowBounceBytes, allocated on
  // first use). It holds packed body bytes [pack_from_, pack_from_ + pack_len_) of pack_slice_,
  // which stays the slice being sent until the send moves past it (then nullptr).
  std::unique_ptr<uint8_t[]> pack_;
  const Slice* pack_slice_ = nullptr;
  uint64_t pack_from_ = 0;
  uint64_t pack_len_ = 0;
  // The verified write being digested (its bytes in order, as they are offered to the socket).
  te::StreamDigest tx_digest_;
  const Slice* tx_digest_slice_ = nullptr;
  uint64_t tx_staged_id_ = 0;  // frame id whose body the tx buffer holds (0: none)
  bool body_staged_ = false;   // the READ body being received lands in rx staging
  std::string body_why_;
  Slice* tx_job_ = nullptr;      // slice a worker is copying into tx staging
  bool tx_job_settled_ = false;  // ...which failed or was cancelled meanwhile:
  int32_t tx_job_status_ = 0;    //    completed with this status once the copy is done
  std::string tx_job_why_;
  bool rx_job_ = false;  // a worker copies rx staging to the device: input paused
};

/** strerror as a std::string, for failure messages. */
inline std::string errstr(int e) { return std::string(std::strerror(e)); }

}  // namespace tetcp
