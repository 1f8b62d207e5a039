// C++ tests of the fabric rail's write fences (write_fences.h): pure bookkeeping, so they
// run without libfabric. Batches and ops are opaque here: distinct addresses suffice.
#include "../src/write_fences.h"

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "../../test/check.h"

using te::fabric::Batch;
using te::fabric::Op;
using te::fabric::WriteFences;
using Released = std::vector<std::pair<Op*, WriteFences::Outcome>>;

static char storage[64];
static Batch* batch(int i) { return reinterpret_cast<Batch*>(storage + i); }
static Op* op(int i) { return reinterpret_cast<Op*>(storage + 32 + i); }

// Plain writes finished locally wait for their fence, then are reported OK.
static void test_held_until_delivered() {
  WriteFences f;
  f.posted_plain(batch(0));
  f.posted_plain(batch(0));
  CHECK(f.plain_done(op(0), batch(0), 0).held);
  CHECK(f.plain_done(op(1), batch(0), 0).held);
  Released r;
  f.fence_done(batch(0), 0, "", r);
  CHECK(r.size() == 2);
  for (auto& [o, out] : r) CHECK(!out.held && out.status == 0);
  CHECK(f.batches() == 0);
}

// Completions come in any order (comp_order NONE): a plain write reported after its
// fence was delivered is done at once.
static void test_fence_first() {
  WriteFences f;
  f.posted_plain(batch(1));
  f.posted_plain(batch(1));
  Released r;
  CHECK(f.plain_done(op(0), batch(1), 0).held);
  f.fence_done(batch(1), 0, "", r);
  CHECK(r.size() == 1);
  CHECK(f.batches() == 1);  // one plain write still out
  WriteFences::Outcome late = f.plain_done(op(1), batch(1), 0);
  CHECK(!late.held && late.status == 0);
  CHECK(f.batches() == 0);
}

// A failed or never-posted fence fails the writes it would have proven, also those that
// report later; a plain write's own failure is kept.
static void test_fence_failed() {
  WriteFences f;
  f.posted_plain(batch(2));
  f.posted_plain(batch(2));
  f.posted_plain(batch(2));
  CHECK(f.plain_done(op(0), batch(2), 0).held);
  WriteFences::Outcome own = f.plain_done(op(1), batch(2), -7);
  CHECK(!own.held && own.status == -7);
  Released r;
  f.fence_done(batch(2), -5, "connection reset", r);
  CHECK(r.size() == 1 && r[0].first == op(0) && r[0].second.status == -5);
  CHECK(r[0].second.why.find("connection reset") != std::string::npos);
  WriteFences::Outcome late = f.plain_done(op(2), batch(2), 0);
  CHECK(!late.held && late.status == -5);
  CHECK(f.batches() == 0);
}

// Batches are independent; a fence for a batch without plain writes changes nothing.
static void test_batches_independent() {
  WriteFences f;
  f.posted_plain(batch(3));
  f.posted_plain(batch(4));
  CHECK(f.plain_done(op(0), batch(3), 0).held);
  CHECK(f.plain_done(op(1), batch(4), 0).held);
  Released r;
  f.fence_done(batch(5), 0, "", r);
  CHECK(r.empty());
  f.fence_done(batch(4), 0, "", r);
  CHECK(r.size() == 1 && r[0].first == op(1));
  std::vector<Op*> left = f.drain_all();
  CHECK(left.size() == 1 && left[0] == op(0));
  CHECK(f.batches() == 0);
}

// A write the rail did not post plainly is not held.
static void test_unknown_batch() {
  WriteFences f;
  WriteFences::Outcome o = f.plain_done(op(0), batch(6), 0);
  CHECK(!o.held && o.status == 0);
}

// The fence is the last write the provider orders (at most max_order_waw_size bytes): a
// larger last write is posted delivery-complete on its own, and the fence before it proves
// the smaller writes; without any write of an ordered size there is no fence.
struct FakeSlice {
  bool write;
  uint64_t len;
  bool fence = false;
};
static void test_fence_within_ordered_size() {
  std::vector<FakeSlice> s = {{true, 10}, {false, 10}, {true, 20}, {true, 100}, {false, 5}};
  CHECK(te::fabric::mark_fence(s, 50) == 2);
  CHECK(s[2].fence && !s[3].fence && !s[0].fence);
  std::vector<FakeSlice> big = {{true, 100}, {true, 200}};
  CHECK(te::fabric::mark_fence(big, 50) == -1);
  CHECK(!big[0].fence && !big[1].fence);
  std::vector<FakeSlice> any = {{true, 100}, {true, 200}, {false, 1}};
  CHECK(te::fabric::mark_fence(any, ~0ull) == 1);  // unlimited ordering: the last write
  std::vector<FakeSlice> reads = {{false, 1}};
  CHECK(te::fabric::mark_fence(reads, ~0ull) == -1);
}

int main() {
  static const CheckGroup groups[] = {{"held until delivered", test_held_until_delivered},
                                      {"fence delivered first", test_fence_first},
                                      {"fence failed", test_fence_failed},
                                      {"batches independent", test_batches_independent},
                                      {"unknown batch", test_unknown_batch},
                                      {"fence within the ordered size", test_fence_within_ordered_size}};
  return run_groups(groups, "write fences: ");
}
