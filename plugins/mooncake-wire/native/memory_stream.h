// A Stream over bytes in memory: the requests a peer would send, and a record of the replies.
// Lets the fuzz target and the native tests drive serve_session without sockets.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "stream.h"

namespace mcwire {

class MemoryStream : public Stream {
 public:
  MemoryStream(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  Io read_exact(void* p, size_t n, bool idle) override {
    if (pos_ == size_ && idle) return Io::CLOSED;
    if (size_ - pos_ < n) {
      pos_ = size_;
      return Io::LOST;
    }
    std::memcpy(p, data_ + pos_, n);
    pos_ += n;
    return Io::OK;
  }
  Io write_all(const void* p, size_t n) override {
    auto* b = static_cast<const uint8_t*>(p);
    // Only the first bytes are kept: a reply may be as long as a registered region.
    size_t keep = out.size() < kKeep ? std::min(n, kKeep - out.size()) : 0;
    out.insert(out.end(), b, b + keep);
    written += n;
    return Io::OK;
  }
  std::vector<uint8_t> out;
  uint64_t written = 0;

 private:
  static constexpr size_t kKeep = 1 << 16;
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace mcwire
