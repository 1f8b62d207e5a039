// The receive path both ends of a connection share: headers, small bodies and control
// messages land in a per-connection buffer and are parsed from there; large bodies bypass
// it and are received straight into their destination (registered memory under a lease,
// or a staging buffer).
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

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

/**
 * SO_RCVLOWAT while a large body arrives in place: the socket reports input once this much
 * of the body is queued (or all of it, when less is left), so a read loop wakes once per
 * kLowatMax bytes rather than for every few segments loopback or the NIC hands over. Below
 * kLowatMin left, input is reported at once. The mark never exceeds what the peer sends
 * without waiting for this side (the rest of the frame's body), closes and errors are
 * reported whatever it is, and the kernel keeps it below the receive buffer.
 */
constexpr uint64_t kLowatMin = 64 * 1024;
constexpr uint64_t kLowatMax = 256 * 1024;

/**
 * The mark for a body with `left` bytes still to come (1: report any input). With a fixed
 * receive buffer of `socket_buffer` bytes (socketBufferBytes; 0: autotuned) it stays under a
 * quarter of it, well inside the window the peer may fill, whatever the kernel's version.
 */
inline int lowat_for(uint64_t left, int socket_buffer = 0) {
  uint64_t most = kLowatMax;
  if (socket_buffer > 0 && static_cast<uint64_t>(socket_buffer) / 4 < most)
    most = static_cast<uint64_t>(socket_buffer) / 4;
  if (left < kLowatMin || most < kLowatMin) return 1;
  return static_cast<int>(left < most ? left : most);
}

/** Sets `fd`'s SO_RCVLOWAT to `want` unless `*current` (the last value set) already is. */
inline void set_lowat(int fd, int want, int* current) {
  if (want == *current) return;
  if (setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &want, sizeof want) == 0) *current = want;
}

/** What a recv() result means to a connection's read loop. */
enum class RecvResult { DATA, CLOSED, AGAIN, INTERRUPTED, FAILED };
inline RecvResult classify_recv(ssize_t r) {
  if (r > 0) return RecvResult::DATA;
  if (r == 0) return RecvResult::CLOSED;
  if (errno == EAGAIN || errno == EWOULDBLOCK) return RecvResult::AGAIN;
  if (errno == EINTR) return RecvResult::INTERRUPTED;
  return RecvResult::FAILED;
}

/** What a connection's read loop does after a recv(): use the bytes, stop reading for now, or try again. */
enum class RecvNext { PROCESS, STOP, RETRY };

/**
 * The read loops' one reading of a recv() result `r` (both ends of a connection): bytes are
 * processed, EAGAIN stops reading until epoll reports more, EINTR retries. The end of the
 * stream or a receive error is handed to `lost(err)` (0: the peer closed; else the errno),
 * which gives the connection up, and stops reading.
 */
template <typename Lost>
RecvNext after_recv(ssize_t r, Lost&& lost) {
  switch (classify_recv(r)) {
    case RecvResult::DATA:
      return RecvNext::PROCESS;
    case RecvResult::AGAIN:
      return RecvNext::STOP;
    case RecvResult::INTERRUPTED:
      return RecvNext::RETRY;
    case RecvResult::CLOSED:
      lost(0);
      return RecvNext::STOP;
    case RecvResult::FAILED:
      break;
  }
  lost(errno);
  return RecvNext::STOP;
}

/**
 * True when a receive that asked for `asked` bytes got fewer (`r` >= 0): the socket held no
 * more just then, so the read loop returns to epoll (level-triggered: it reports the next
 * bytes) rather than spend a recv on EAGAIN.
 */
inline bool drained(ssize_t r, uint64_t asked) { return r >= 0 && static_cast<uint64_t>(r) < asked; }

/** Receives the next part (at most kDirectChunk) of a body whose `left` bytes go to `dst`. */
inline ssize_t recv_in_place(int fd, uint64_t dst, uint64_t left, uint64_t* asked = nullptr) {
  const uint64_t chunk = left < kDirectChunk ? left : kDirectChunk;
  if (asked) *asked = chunk;
  return ::recv(fd, reinterpret_cast<void*>(dst), chunk, 0);
}

/**
 * recv_in_place into registered memory, under a lease on the chunk. When the destination
 * is no longer registered nothing is received and `*unregistered` is set (the caller
 * drains the rest of the body and reports MEMORY_NOT_REGISTERED).
 */
inline ssize_t recv_into_registered(int fd, const te::MemoryRegistry& registry, bool remote, uint64_t dst,
                                    uint64_t left, bool* unregistered, uint64_t* asked = nullptr) {
  te::Lease lease;
  const uint64_t chunk = left < kDirectChunk ? left : kDirectChunk;
  *unregistered = registry.acquire(dst, chunk, remote, lease) != te::TE_OK;
  if (*unregistered) return 0;
  return recv_in_place(fd, dst, chunk, asked);
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
  /** As fill, receiving at most `most` bytes (0 < most); `*asked`: how many it asked for. */
  ssize_t fill(int fd, size_t capacity, size_t most, uint64_t* asked = nullptr) {
    size_t room = 0;
    uint8_t* at = tail(capacity, most, &room);
    if (asked) *asked = room;
    ssize_t r = ::recv(fd, at, room, 0);
    if (r > 0) grew(static_cast<size_t>(r));
    return r;
  }
  /**
   * The free tail, at most `most` bytes of it (`*room`), prepared as fill prepares it; the
   * caller receives into it and then calls grew() with the count received.
   */
  uint8_t* tail(size_t capacity, size_t most, size_t* room) {
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
    const size_t free = cap_ - end_;
    *room = most < free ? most : free;
    return buf_.get() + end_;
  }
  /** `n` bytes were received into tail(). */
  void grew(size_t n) { end_ += n; }
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

/**
 * The last part of a body into registered memory (as recv_into_registered, `left` at most
 * kDirectChunk), and, in the same recv, up to `next` bytes after it into `rbuf` (empty):
 * the next frame's header, when it has arrived, costs no recv of its own. Returns what
 * recvmsg returned; bytes past `left` are already in `rbuf`.
 */
inline ssize_t recv_body_end(int fd, const te::MemoryRegistry& registry, bool remote, uint64_t dst, uint64_t left,
                             RecvBuffer& rbuf, size_t capacity, size_t next, bool* unregistered, uint64_t* asked) {
  te::Lease lease;
  *unregistered = registry.acquire(dst, left, remote, lease) != te::TE_OK;
  if (*unregistered) return 0;
  size_t room = 0;
  uint8_t* tail = rbuf.tail(capacity, next, &room);
  iovec iov[2] = {{reinterpret_cast<void*>(dst), left}, {tail, room}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = 2;
  *asked = left + room;
  ssize_t r = ::recvmsg(fd, &msg, 0);
  if (r > 0 && static_cast<uint64_t>(r) > left) rbuf.grew(static_cast<size_t>(r - static_cast<ssize_t>(left)));
  return r;
}

}  // namespace tetcp
