// The bound on a rail's peerless control messages (answers to whoever asked: HELLO_ACK,
// TABLE, REVOKE_ACK, NOTIFY_ACK). A peer's requests decide how many there are, so they are
// counted and bounded; beyond the bound an answer is not queued (the asker times out and
// asks again). No libfabric here; the rail holds its q_mu around every call.
#pragma once

#include <cstddef>

namespace te::fabric {

class AnswerBound {
 public:
  static constexpr size_t kMaxAnswers = 4096;
  static constexpr size_t kMaxAnswerBytes = 64u << 20;

  /** Counts in an answer of `bytes`; false (nothing counted) when it would pass either bound. */
  bool admit(size_t bytes) {
    if (count_ >= kMaxAnswers || bytes_ + bytes > kMaxAnswerBytes) return false;
    ++count_;
    bytes_ += bytes;
    return true;
  }
  /** An admitted answer of `bytes` left the queue (sent or dropped). */
  void release(size_t bytes) {
    --count_;
    bytes_ -= bytes;
  }
  size_t count() const { return count_; }
  size_t bytes() const { return bytes_; }

 private:
  size_t count_ = 0, bytes_ = 0;
};

}  // namespace te::fabric
