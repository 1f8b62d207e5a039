// The buffered receive both ends of a connection share: headers, small bodies and control
// messages land in a per-connection buffer and are parsed from there (large bodies bypass
// it and are received straight into registered memory).
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstdint>
#include <cstring>
#include <memory>

namespace tetcp {

class RecvBuffer {
 public:
  /**
   * Receives into the free tail, first allocating (uninitialised: an idle connection costs
   * no touched pages) or growing to `capacity`, resetting an empty buffer or moving
   * unparsed bytes to the front of a full one. Returns what recv returned.
   */
  ssize_t fill(int fd, size_t capacity) {
    if (pos_ == end_) pos_ = end_ = 0;
    if (cap_ < capacity) {
      std::unique_ptr<uint8_t[]> bigger(new uint8_t[capacity]);
      if (end_ > pos_) std::memcpy(bigger.get(), buf_.get() + pos_, end_ - pos_);
      end_ -= pos_;
      pos_ = 0;
      buf_ = std::move(bigger);
      cap_ = capacity;
    } else if (end_ == cap_) {
      std::memmove(buf_.get(), buf_.get() + pos_, end_ - pos_);
      end_ -= pos_;
      pos_ = 0;
    }
    ssize_t r = ::recv(fd, buf_.get() + end_, cap_ - end_, 0);
    if (r > 0) end_ += static_cast<size_t>(r);
    return r;
  }
  /** The unparsed bytes. */
  const uint8_t* data() const { return buf_.get() + pos_; }
  size_t size() const { return end_ - pos_; }
  bool empty() const { return pos_ == end_; }
  void consume(size_t n) { pos_ += n; }
  void clear() { pos_ = end_ = 0; }
  /** Frees the memory if nothing is buffered; the next fill allocates again. */
  void release() {
    if (pos_ != end_) return;
    buf_.reset();
    cap_ = pos_ = end_ = 0;
  }
  size_t capacity() const { return cap_; }

 private:
  std::unique_ptr<uint8_t[]> buf_;
  size_t cap_ = 0, pos_ = 0, end_ = 0;
};

}  // namespace tetcp
