// The target side of one connection: handshake (epoch check, optional challenge/response),
// then WRITE/READ/NOTIFY requests validated against this process's registered
// remote-accessible memory before any byte is touched. A malformed frame closes this
// connection only. Its jobs, one file each: server_conn.cpp (lifecycle, events),
// server_conn_receive.cpp (read loop, parsing, body modes), server_conn_handshake.cpp
// (HELLO/AUTH), server_conn_requests.cpp (WRITE/READ/NOTIFY/REVOKE), server_conn_respond.cpp
// (responses and their sending).
#pragma once

#include <sys/uio.h>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "recv_buffer.h"
#include "served_connections.h"
#include "te/digest.h"
#include "transport.h"

namespace tetcp {

/** A verified write's body is received at most this much at a time, so its digest reads it from the cache. */
constexpr uint64_t kDigestReceive = 256 * 1024;

class ServerConn : public IoHandler {
 public:
  /** `address`: the initiator's IP address, counted against the per-address cap until dropped. */
  ServerConn(Transport* t, Loop* loop, int fd, std::string address);
  ~ServerConn() override;
  void on_event(uint32_t events) override;
  void on_tick(int64_t now) override;
  void on_shutdown() override;
  /**
   * Loop thread: the initiator reset this connection and asks (over another one) that
   * nothing more from it be applied. Closes it and calls `confirmed` once no copy into
   * registered memory from it is running (at once, or when a running device copy is done).
   */
  void revoke(std::function<void()> confirmed);

 private:
  /** Receive buffer of a ready connection: large enough for many small frames per recv. */
  static constexpr size_t kServerReadBuffer = 64 * 1024;
  enum State { HELLO, AUTH, READY };
  struct Out {
    uint8_t head[kHeaderSize + 12 * kMaxSegments];  // a WRITEV answer's statuses and digests fit
    uint32_t head_len = 0;
    uint64_t body = 0;  // registered memory (READ responses)
    uint64_t body_len = 0;
    int device = kHost;  // device of `body` (sent through the pinned tx buffer, chunk by chunk)
    uint64_t seq = 0;
  };
  /** Receives what the socket holds, then sets when epoll is to report it next (tune_lowat). */
  void read_input();
  void read_available();
  void tune_lowat();
  bool header_only() const;
  size_t read_most(size_t cap) const;
  /**
   * The in-place receive of a WRITEV's segments: the current one and the run after it that
   * next_segments allows, and the next frame's header when the run reaches the frame's end.
   * `*to_bodies`: the bytes asked for the segments (any more went to rbuf_).
   */
  ssize_t recv_segments(bool* unregistered, uint64_t* asked, uint64_t* to_bodies);
  /**
   * One recvmsg into `iov[0..n)` (body bytes, `bytes` of them, room for one more iovec) and,
   * when they end the frame (`to_end`), the next frame's header into rbuf_ behind them.
   */
  ssize_t recv_bodies(iovec* iov, size_t n, uint64_t bytes, bool to_end, uint64_t* asked);
  bool parse();
  /** Checks a frame's header and hands it to the handshake or to the request it opens. */
  bool on_header(const Header& h);
  bool on_handshake_header(const Header& h);
  bool on_request_header(const Header& h);
  bool on_write_header(const Header& h);
  /** A WRITE's range [addr, +len) and its whole request [span_addr, +span_len): OK, or why not. */
  int32_t validate(uint64_t addr, uint64_t len, uint64_t span_addr, uint64_t span_len) const;
  int32_t validate(const Header& h) const { return validate(h.addr, h.length, h.span_addr, h.span_length); }
  /** The current frame's body (cur_.length bytes) goes through `m`, to `dst` where it has one. */
  enum BodyMode { DIRECT, DRAIN, CTRL, STAGED };
  void start_body(BodyMode m, uint64_t dst) { start_body(m, dst, cur_.length); }
  /** As start_body, for the next `len` bytes of the frame (a WRITEV segment, or its table). */
  void start_body(BodyMode m, uint64_t dst, uint64_t len);
  /** The next `len` body bytes are a WRITE to `addr` that validated as `status`: DIRECT, STAGED or DRAIN. */
  void start_write_body(uint64_t addr, uint64_t len, int32_t status);
  // WRITEV (server_conn_writev.cpp): its table, then each segment as a WRITE of its own.
  bool on_writev_header(const Header& h);
  void on_writev_table();
  void start_segment();
  /** A WRITEV body part is in: the table, or a segment (then the next one, or the answer). */
  void finish_writev_part();
  /**
   * The segments after the current one that the next in-place receive may fill too (host
   * memory, accepted, leased into `leases`): appends them to `iov` (at most `max` entries,
   * `budget` bytes); returns whether the frame's last segment is among them.
   */
  bool next_segments(iovec* iov, size_t* n, size_t max, uint64_t budget, std::vector<te::Lease>* leases) const;
  // WRITE_ROWS (server_conn_rows.cpp): its row table, then its bytes into the rows.
  bool on_rows_header(const Header& h);
  void on_rows_table();
  /** The in-place receive of a WRITE_ROWS body: one iovec per row piece (and the next header at its end). */
  ssize_t recv_rows(bool* unregistered, uint64_t* asked, uint64_t* to_bodies);
  /** recv_rows for narrow rows: into row_bounce_, then into the rows with streaming stores. */
  ssize_t recv_rows_bounced(bool* unregistered, uint64_t* asked, uint64_t* to_bodies);
  /** Buffered body bytes into the rows, under a lease on their span; false if no longer registered. */
  bool copy_into_rows(const uint8_t* src, uint64_t len);
  void finish_body();
  void finish_hello();
  void finish_auth();
  void finish_request();
  void respond(const Header& req, int32_t status, uint64_t body = 0, uint64_t body_len = 0,
               const uint8_t* extra = nullptr, size_t extra_len = 0);
  /** Answers a WRITE or WRITE_ROWS: with the digest of what landed when the request asked for it and it applied. */
  void respond_write(const Header& req, int32_t status);
  /** Starts the digest of a write body when its request asks for one and was accepted. */
  void start_digest(int32_t status);
  /** Bytes one in-place receive of a body takes at most: kDirectChunk; kDigestReceive for a verified write's, digested
   * right after from the cache. */
  uint64_t receive_most() const { return digest_body_ ? kDigestReceive : kDirectChunk; }
  /** Feeds `len` bytes that landed at `at` (an address, or for rows a packed offset) to the body's digest. */
  void digest_landed(uint64_t at, uint64_t len);
  void flush();
  /** The iovecs of one writev from the front of out_; false when the connection was dropped. */
  bool gather_responses(iovec* iov, size_t* count, std::vector<te::Lease>* leases);
  void consume_sent(uint64_t written);
  void drop(const std::string& why);
  /** The handshake is done: requests are served from now on, and REVOKE can name this connection. */
  void enter_ready();
  /** A REVOKE arrived (its body in ctrl_body_): input pauses until the named connection confirmed. */
  void start_revoke(const Header& h);
  void on_revoke_confirmed(const Header& h, int32_t status);
  /** Input waits: responses backed up, a device copy running, or a REVOKE unanswered. */
  bool input_held() const { return input_paused_ || rx_busy_ || awaiting_revoke_; }
  void set_interest();
  /** False (and the connection dropped) once the initiator closed its end. */
  bool initiator_connected();
  /**
   * Hands the filled part of rx staging to a worker, which copies it to the device (WRITE
   * into device memory); input pauses until on_stage_flushed. False when nothing was handed
   * over (nothing staged, the body already refused, or the connection dropped).
   */
  bool stage_flush();
  void on_stage_flushed(int32_t status);
  /** Hands the copy of body bytes [from, +chunk) of the front READ response to a worker. */
  void start_read_stage(const Out& o, uint64_t from);
  void on_read_staged(uint64_t seq, uint64_t from, uint64_t len, int32_t status, const std::string& why);

  Transport* t_;
  Loop* loop_;
  int fd_;
  std::string address_;
  State state_ = HELLO;
  int64_t deadline_;     // handshake deadline
  int64_t last_active_;  // last tick that saw bytes move (either direction)
  bool active_ = false;  // bytes moved since the last tick
  bool close_after_flush_ = false;
  bool want_out_ = false;
  bool input_paused_ = false;
  uint32_t interest_ = 0;
  std::string peer_name_ = "?";
  RecvBuffer rbuf_;
  bool in_body_ = false;
  bool large_writes_ = false;  // the last request was a WRITE of at least kDirectMin bytes
  int lowat_ = 1;              // the socket's SO_RCVLOWAT, as last set (the kernel's default: 1)
  BodyMode mode_ = DRAIN;
  Header cur_;
  uint64_t body_left_ = 0;
  uint64_t body_dst_ = 0;
  int32_t body_status_ = 0;
  std::vector<uint8_t> ctrl_body_;
  // The WRITEV frame being received: its table, then its segments one at a time.
  struct WriteV {
    bool table = false;  // the table is being received (as a control body)
    std::vector<Segment> segs;
    std::vector<int32_t> status;    // per segment: validation, then what became of its bytes
    std::vector<int> device;        // per segment: device of its destination (kHost: host memory)
    std::vector<uint64_t> digests;  // per segment of a verified WRITEV: the digest of what landed
    uint32_t at = 0;                // the segment being received
  } vec_;
  // The WRITE_ROWS frame being received: its row table, then its body, whose body_dst_ is
  // then a packed offset into rows_ (not an address).
  bool rows_table_ = false;  // the row table is being received (as a control body)
  bool rows_body_ = false;   // the body goes into rows_ (DIRECT)
  StridedRows rows_;
  std::unique_ptr<uint8_t[]> row_bounce_;  // narrow rows land here first; freed when idle
  // A verified write's body (wire.h, kFlagDigest): the digest of its bytes as they land.
  bool digest_body_ = false;
  te::StreamDigest rx_digest_;
  std::deque<Out> out_;
  uint64_t out_off_ = 0;
  uint8_t client_nonce_[kNonceSize];
  uint8_t server_nonce_[kNonceSize];
  // CUDA staging (device regions only; allocated on first use). The copies between a staging
  // buffer and the device run on the transport's workers, one per direction at a time; a
  // job holds its Stager, and its result is dropped if this connection is gone by then.
  std::shared_ptr<Stager> rx_stage_;  // WRITE bodies: received here, then copied to the device
  std::shared_ptr<Stager> tx_stage_;  // READ bodies: copied from the device, then sent
  bool rx_busy_ = false;              // a worker copies rx staging to the device: input paused
  bool tx_busy_ = false;              // a worker fills tx staging: the front response waits
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);     // expires with this connection
  int stage_device_ = kHost;                                       // STAGED: device of the WRITE's destination
  uint64_t stage_dst_ = 0;                                         // STAGED: device address of rx staging's first byte
  uint64_t stage_fill_ = 0;                                        // STAGED: bytes in rx staging
  enum Liveness { UNKNOWN, CONNECTED, GONE } liveness_ = UNKNOWN;  // since the last recv
  bool revoked_ = false;                                           // its initiator revoked it: nothing more is applied
  bool awaiting_revoke_ = false;  // a REVOKE received here waits for its connection's answer
  bool served_ = false;           // listed in the transport's served connections
  // The running rx device copy (held by the worker's job too) and the REVOKEs waiting for it.
  std::shared_ptr<ReceiveCopies> rx_copies_ = std::make_shared<ReceiveCopies>();
  uint64_t next_seq_ = 1;
  uint64_t tx_seq_ = 0;  // response whose body bytes [tx_from_, +tx_len_) tx staging holds
  uint64_t tx_from_ = 0, tx_len_ = 0;
};

}  // namespace tetcp
