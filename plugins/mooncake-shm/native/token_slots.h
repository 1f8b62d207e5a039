// What an initiator has in flight at one target, found by the token the target echoes back.
//
// A token names a slot (its low 32 bits) and that slot's use (its high 32 bits), so a
// completion finds its request by indexing, and a slot's storage is reused rather than
// allocated per request (a hash map allocated a node for every request sent, most of an
// initiator's allocations per batch). A token of a slot since reused, or one never handed
// out, finds nothing: a confused or hostile target cannot complete a request it was not sent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace teshm {

template <typename T>
class TokenSlots {
 public:
  /** Requests held now. */
  size_t size() const { return live_; }

  /** Stores `v` and returns its token. Slots grow to the most values ever held at once. */
  uint64_t put(T&& v) {
    uint32_t i;
    if (!free_.empty()) {
      i = free_.back();
      free_.pop_back();
    } else {
      i = static_cast<uint32_t>(slots_.size());
      slots_.emplace_back();
    }
    Slot& s = slots_[i];
    s.use += 1;
    s.live = true;
    s.value = std::move(v);
    ++live_;
    return (static_cast<uint64_t>(s.use) << 32) | i;
  }

  /** The value of a token handed out and not taken yet, else nullptr. Invalidated by put(). */
  T* find(uint64_t token) {
    const uint32_t i = static_cast<uint32_t>(token);
    if (i >= slots_.size()) return nullptr;
    Slot& s = slots_[i];
    if (!s.live || s.use != static_cast<uint32_t>(token >> 32)) return nullptr;
    return &s.value;
  }

  /** Moves the token's value into `out` and frees its slot; false when find() would fail. */
  bool take(uint64_t token, T* out) {
    T* v = find(token);
    if (v == nullptr) return false;
    *out = std::move(*v);
    release(static_cast<uint32_t>(token));
    return true;
  }

  template <typename F>
  void for_each(F&& f) {
    for (Slot& s : slots_)
      if (s.live) f(s.value);
  }

  /** Moves every value held into `out` and frees all slots (their uses go on counting). */
  void drain(std::vector<T>* out) {
    for (uint32_t i = 0; i < slots_.size(); ++i) {
      if (!slots_[i].live) continue;
      out->push_back(std::move(slots_[i].value));
      release(i);
    }
  }

 private:
  struct Slot {
    T value{};
    uint32_t use = 0;
    bool live = false;
  };

  void release(uint32_t i) {
    Slot& s = slots_[i];
    s.value = T{};  // let go of what it holds now, not when the slot is reused
    s.live = false;
    --live_;
    free_.push_back(i);
  }

  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;  // last freed first: the slot most recently touched is reused
  size_t live_ = 0;
};

}  // namespace teshm
