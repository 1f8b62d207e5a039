// Sockets for the data path: a listener, a connect with a deadline, and a Stream over a
// non-blocking socket that waits in short poll slices so a stop or cancel is seen quickly.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "stream.h"

namespace mcwire {

using Clock = std::chrono::steady_clock;

/** Binds and listens on an IP literal (v4 or v6) and port (0: ephemeral); -1 and `*err` on failure. */
int listen_on(const std::string& host, uint16_t port, std::string* err);
/** The local port of a bound socket. */
uint16_t local_port(int fd);
/** Connects to an IP literal before `deadline`, checking `stopped` between poll slices. */
int connect_to(const std::string& host, uint16_t port, Clock::time_point deadline, const std::function<bool()>& stopped,
               std::string* err);
void set_nonblocking_nodelay(int fd);

/**
 * Blocking reads and writes (a whole body in one recv with MSG_WAITALL: one wakeup instead of
 * one per segment) that give up the kernel wait every `slice_ms` (SO_RCVTIMEO/SO_SNDTIMEO) to
 * check the stop flag, the deadline and the timeouts. The constructor makes the socket
 * blocking.
 */
class SocketStream : public Stream {
 public:
  /**
   * `idle_ms`: how long a read waiting for a new request may wait; `io_ms`: how long any other
   * read or write may go without progress; `deadline`: an absolute limit for everything.
   */
  SocketStream(int fd, int idle_ms, int io_ms, std::function<bool()> stopped,
               Clock::time_point deadline = Clock::time_point::max(), int slice_ms = 20);
  Io read_exact(void* p, size_t n, bool idle) override;
  Io write_all(const void* p, size_t n) override;
  /** Bytes handed to the kernel by write_all so far (a cancelled WRITE may have sent some). */
  uint64_t sent() const { return sent_; }
  /** The last errno-style description of a LOST result. */
  const std::string& error() const { return error_; }
  /** Whether the peer sent something now (non-blocking peek), without consuming it. */
  bool readable_now() const;

 private:
  /** After a slice without progress: STOPPED, TIMEOUT, or OK to wait again. */
  Io check(Clock::time_point last_progress, int limit_ms);
  int fd_;
  int idle_ms_, io_ms_;
  std::function<bool()> stopped_;
  Clock::time_point deadline_;
  uint64_t sent_ = 0;
  std::string error_;
};

}  // namespace mcwire
