// C++ tests of the rail's address-vector cache (address_cache.h) and of its control queue's
// bound on answers (answer_bound.h): pure bookkeeping, so they run without libfabric. AV
// entries are plain integers here, as a provider hands them out.
#include "../src/address_cache.h"

#include <cstdio>
#include <set>
#include <vector>

#include "../../test/check.h"
#include "../src/answer_bound.h"

using te::fabric::AddressCache;
using te::fabric::AnswerBound;
using Raw = AddressCache::Raw;

static Raw raw(uint8_t i) { return Raw{i, 0, 7}; }
static const std::set<AddressCache::Addr> kNothing;

// Lookups find what was inserted; touch and find agree; an unknown address has no entry.
static void test_lookup() {
  AddressCache c;
  CHECK(c.touch(raw(1)) == AddressCache::kNone);
  CHECK(c.find(raw(1)) == AddressCache::kNone);
  CHECK_EQ(c.insert(raw(1), 10, kNothing, 0), 0u);
  CHECK_EQ(c.insert(raw(2), 20, kNothing, 0), 0u);
  CHECK_EQ(c.touch(raw(1)), 10u);
  CHECK_EQ(c.find(raw(2)), 20u);
  CHECK_EQ(c.size(), 2u);
  CHECK(c.retiring_empty());
}

// Beyond the bound the least recently used entry goes; a touch makes an entry recent.
static void test_evicts_least_recently_used() {
  AddressCache c;
  c.max_entries = 2;
  c.insert(raw(1), 10, kNothing, 0);
  c.insert(raw(2), 20, kNothing, 0);
  CHECK(c.full());
  c.touch(raw(1));  // 2 is now the least recently used
  CHECK_EQ(c.insert(raw(3), 30, kNothing, 0), 1u);
  CHECK_EQ(c.size(), 2u);
  CHECK(c.find(raw(2)) == AddressCache::kNone);
  CHECK_EQ(c.find(raw(1)), 10u);
  CHECK_EQ(c.find(raw(3)), 30u);
  CHECK_EQ(c.retiring_size(), 1u);
}

// find() does not change the order (a plain lookup is not a use).
static void test_find_keeps_order() {
  AddressCache c;
  c.max_entries = 2;
  c.insert(raw(1), 10, kNothing, 0);
  c.insert(raw(2), 20, kNothing, 0);
  c.find(raw(1));
  c.insert(raw(3), 30, kNothing, 0);
  CHECK(c.find(raw(1)) == AddressCache::kNone);
  CHECK_EQ(c.find(raw(2)), 20u);
}

// Entries peers opened here send to (pinned) and the one just inserted are spared, even
// when that leaves the cache over its bound.
static void test_pinned_spared() {
  AddressCache c;
  c.max_entries = 1;
  c.insert(raw(1), 10, kNothing, 0);
  CHECK_EQ(c.insert(raw(2), 20, {10}, 0), 0u);
  CHECK_EQ(c.size(), 2u);
  CHECK_EQ(c.find(raw(1)), 10u);
  // Unpinned, the oldest goes at the next insert; the new one stays.
  CHECK_EQ(c.insert(raw(3), 30, kNothing, 0), 2u);
  CHECK_EQ(c.size(), 1u);
  CHECK_EQ(c.find(raw(3)), 30u);
}

// A forgotten entry retires only after the grace period; evicted ones at the next scan.
static void test_retire_after_grace() {
  AddressCache c;
  c.insert(raw(1), 10, kNothing, 0);
  CHECK(c.forget(raw(1), 1000));
  CHECK(!c.forget(raw(1), 1000));
  CHECK(c.find(raw(1)) == AddressCache::kNone);
  CHECK(c.due(1000 + AddressCache::kRetireGraceMs - 1).empty());
  std::vector<AddressCache::Addr> due = c.due(1000 + AddressCache::kRetireGraceMs);
  CHECK_EQ(due.size(), 1u);
  CHECK(c.take_removable(due, kNothing) == std::vector<AddressCache::Addr>{10});
  CHECK(c.retiring_empty());

  AddressCache e;
  e.max_entries = 1;
  e.insert(raw(1), 10, kNothing, 5000);
  e.insert(raw(2), 20, kNothing, 5000);
  CHECK_EQ(e.due(5000).size(), 1u);  // evicted: no grace
}

// An entry still used (by a message, an operation or an open peer) stays retiring; one
// mapped again (the provider handed out the same entry) is in use again and is not removed.
static void test_used_and_remapped_stay() {
  AddressCache c;
  c.insert(raw(1), 10, kNothing, 0);
  c.insert(raw(2), 20, kNothing, 0);
  c.forget(raw(1), 0);
  c.forget(raw(2), 0);
  std::vector<AddressCache::Addr> due = c.due(AddressCache::kRetireGraceMs);
  CHECK_EQ(due.size(), 2u);
  c.insert(raw(3), 20, kNothing, 0);  // entry 20 handed out again
  CHECK(c.take_removable(due, {10}).empty());
  CHECK_EQ(c.retiring_size(), 1u);  // 10: used, still retiring; 20: mapped again, no longer
  CHECK(c.take_removable(c.due(AddressCache::kRetireGraceMs), kNothing) == std::vector<AddressCache::Addr>{10});
  CHECK(c.retiring_empty());
  CHECK_EQ(c.find(raw(3)), 20u);
}

// Answers are bounded by count and by bytes; a released answer makes room again.
static void test_answer_bound() {
  AnswerBound b;
  for (size_t i = 0; i < AnswerBound::kMaxAnswers; ++i) CHECK(b.admit(16));
  CHECK(!b.admit(16));
  CHECK_EQ(b.count(), AnswerBound::kMaxAnswers);
  b.release(16);
  CHECK(b.admit(16));
  CHECK_EQ(b.bytes(), AnswerBound::kMaxAnswers * 16);

  AnswerBound big;
  CHECK(big.admit(AnswerBound::kMaxAnswerBytes - 1));
  CHECK(!big.admit(2));
  CHECK(big.admit(1));
  CHECK_EQ(big.count(), 2u);
  big.release(1);
  big.release(AnswerBound::kMaxAnswerBytes - 1);
  CHECK_EQ(big.bytes(), 0u);
  CHECK(big.admit(AnswerBound::kMaxAnswerBytes));
}

int main() {
  test_lookup();
  test_evicts_least_recently_used();
  test_find_keeps_order();
  test_pinned_spared();
  test_retire_after_grace();
  test_used_and_remapped_stay();
  test_answer_bound();
  if (failures) {
    std::fprintf(stderr, "address cache tests: %d check(s) failed\n", failures);
    return 1;
  }
  std::printf("address cache tests: ok\n");
  return 0;
}
