// The budget for received notifications the JS thread has not taken yet: at most
// `per_peer` from one sender and at most `max_bytes` in all, so a peer that floods
// notifications is refused instead of growing the event queue without bound.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace te {

/**
 * Internally locked: admit() runs on transport threads while release() runs on the JS
 * thread, so every method takes the budget's own mutex and callers hold no lock for it.
 * The cost of a notification is the caller's to compute; release() must pass the same
 * cost that admit() charged.
 */
class NotifyBudget {
 public:
  NotifyBudget(uint64_t per_peer, uint64_t max_bytes) : per_peer_(per_peer), max_bytes_(max_bytes) {}

  NotifyBudget(const NotifyBudget&) = delete;
  NotifyBudget& operator=(const NotifyBudget&) = delete;

  /** Charges one notification of `cost` bytes to `from`; false (nothing charged) when over either limit. */
  bool admit(const std::string& from, uint64_t cost) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = queued_.find(from);
    const uint64_t mine = it == queued_.end() ? 0 : it->second;
    if (mine >= per_peer_ || bytes_ + cost > max_bytes_ || bytes_ + cost < bytes_) return false;
    if (it == queued_.end()) {
      queued_.emplace(from, 1);
    } else {
      ++it->second;
    }
    bytes_ += cost;
    return true;
  }

  /**
   * Gives back one notification of `cost` bytes from `from`. A sender with nothing charged
   * is ignored (a notification taken twice must not free another sender's share), and the
   * byte count never goes below zero.
   */
  void release(const std::string& from, uint64_t cost) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = queued_.find(from);
    if (it == queued_.end()) return;
    if (--it->second == 0) queued_.erase(it);
    bytes_ = bytes_ > cost ? bytes_ - cost : 0;
  }

  /** Notifications from `from` admitted and not yet released. */
  uint64_t queued(const std::string& from) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = queued_.find(from);
    return it == queued_.end() ? 0 : it->second;
  }

  /** Bytes admitted and not yet released, over all senders. */
  uint64_t bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return bytes_;
  }

  /** Senders with at least one notification charged (no entry is kept for the others). */
  size_t senders() const {
    std::lock_guard<std::mutex> lock(mu_);
    return queued_.size();
  }

 private:
  const uint64_t per_peer_;
  const uint64_t max_bytes_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, uint64_t> queued_;
  uint64_t bytes_ = 0;
};

}  // namespace te
