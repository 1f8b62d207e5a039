// A byte stream the data-path protocol runs over: a socket in the transport, memory in the
// fuzz target and the unit tests. Blocking calls with their own deadlines.
#pragma once

#include <cstddef>

namespace mcwire {

enum class Io {
  OK,
  CLOSED,   // orderly end of stream before the first byte of a read
  LOST,     // error, reset, or end of stream in the middle of a read
  TIMEOUT,  // no progress within the stream's deadline
  STOPPED,  // the owner is shutting down or cancelled the work
};

class Stream {
 public:
  virtual ~Stream() = default;
  /**
   * Reads exactly `n` bytes. `idle`: waiting for the next request (the idle timeout
   * applies, and an end of stream before any byte is CLOSED, not LOST).
   */
  virtual Io read_exact(void* p, size_t n, bool idle) = 0;
  virtual Io write_all(const void* p, size_t n) = 0;
};

}  // namespace mcwire
