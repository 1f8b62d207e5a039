// The receive path both ends of a connection share: headers, small bodies and control
// messages land in a per-connection buffer and are parsed from there; large bodies bypass
// it and are received straight into their destination (registered memory under a lease,
// or a staging buffer).
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>

#include "te/memory_registry.h"

namespace tetcp {

/** A body with at least this much left, and nothing buffered, is received in place. */
constexpr uint64_t kDirectMin = 16 * 1024;
/** At most this much per in-place recv (one lease each, so unregistering waits little). */
constexpr uint64_t kDirectChunk = 4u << 20;

/** What a recv() result means to a connection's read loop. */
enum class RecvResult { DATA, CLOSED, AGAIN, INTERRUPTED, FAILED };
inline RecvResult classify_recv(ssize_t r) {
  if (r > 0) return RecvResult::DATA;
  if (r == 0) return RecvResult::CLOSED;
  if (errno == EAGAIN || errno == EWOULDBLOCK) return RecvResult::AGAIN;
  if (errno == EINTR) return RecvResult::INTERRUPTED;
  return RecvResult::FAILED;
}

/** Receives the next part (at most kDirectChunk) of a body whose `left` bytes go to `dst`. */
inline ssize_t recv_in_place(int fd, uint64_t dst, uint64_t left) {
  return ::recv(fd, reinterpret_cast<void*>(dst), left < kDirectChunk ? left : kDirectChunk, 0);
}

/**
 * recv_in_place into registered memory, under a lease on the chunk. When the destination
 * is no longer registered nothing is received and `*unregistered` is set (the caller
 * drains the rest of the body and reports MEMORY_NOT_REGISTERED).
 */
inline ssize_t recv_into_registered(int fd, const te::MemoryRegistry& registry, bool remote, uint64_t dst, uint64_t left,
                                    bool* unregistered) {
  te::Lease lease;
  const uint64_t chunk = left < kDirectChunk ? left : kDirectChunk;
  *unregistered = registry.acquire(dst, chunk, remote, lease) != te::TE_OK;
  if (*unregistered) return 0;
  return recv_in_place(fd, dst, chunk);
}

/** Copies buffered body bytes into registered memory under a lease; false if no longer registered. */
inline bool copy_into_registered(const te::MemoryRegistry& registry, bool remote, uint64_t dst, const uint8_t* src,
                                 uint64_t len) {
  te::Lease lease;
  if (registry.acquire(dst, len, remote, lease) != te::TE_OK) return false;
  std::memcpy(reinterpret_cast<void*>(dst), src, len);
  return true;
}

class RecvBuffer {
 public:
  /**
   * Receives into the free tail, first allocating (uninitialised: an idle connection costs
   * no touched pages) or growing to `capacity`, resetting an empty buffer or moving
   * unparsed bytes to the front of a full one. Returns what recv returned.
   */
  ssize_t fill(int fd, size_t capacity) { return fill(fd, capacity, capacity); }
  /** As fill, receiving at most `most` bytes (0 < most). */
  ssize_t fill(int fd, size_t capacity, size_t most) {
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
    const size_t room = cap_ - end_;
    ssize_t r = ::recv(fd, buf_.get() + end_, most < room ? most : room, 0);
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
