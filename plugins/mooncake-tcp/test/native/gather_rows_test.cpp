// C++ tests of gathered writes (strided_rows.h): the iovecs of a slice that starts inside a
// row and is cut where a writev runs out of room, and a batch of gathered writes between two
// transport cores, coalesced and not, whose rows land packed and whose refusals are their own.
#include <sys/uio.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "strided_rows.h"
#include "tcp_node.h"
#include "transport.h"

using namespace tetcp;
using tcp_test::Node;
using tcp_test::options;

// Packed bytes [from, from + len) of rows of 10 bytes, 16 apart: the iovecs name exactly the
// rows' bytes in order, and a call with too little room covers a prefix the next call goes on from.
void test_gather_rows_iovecs() {
  std::vector<uint8_t> mem(400);
  for (size_t i = 0; i < mem.size(); ++i) mem[i] = uint8_t(i);
  const StridedRows g{reinterpret_cast<uint64_t>(mem.data()), 10, 16};
  std::vector<uint8_t> want;
  for (int r = 0; r < 20; ++r) want.insert(want.end(), mem.begin() + r * 16, mem.begin() + r * 16 + 10);
  for (uint64_t from : {0, 3, 10, 57}) {
    std::vector<uint8_t> got;
    uint64_t at = from;
    const uint64_t end = 200;
    while (at < end) {
      iovec iov[3];
      size_t n = 0;
      const uint64_t done = g.append(at, end - at, iov, &n, 3);
      CHECK(done > 0 && n <= 3);
      uint64_t sum = 0;
      for (size_t k = 0; k < n; ++k) {
        const auto* p = static_cast<const uint8_t*>(iov[k].iov_base);
        got.insert(got.end(), p, p + iov[k].iov_len);
        sum += iov[k].iov_len;
      }
      CHECK(sum == done);
      at += done;
    }
    CHECK(std::vector<uint8_t>(want.begin() + from, want.end()) == got);
    std::vector<uint8_t> copied(end - from);
    g.copy_out(from, end - from, copied.data());
    CHECK(copied == got);
    uint64_t lo = 0, hi = 0;
    g.span(from, end - from, &lo, &hi);
    CHECK(lo == g.addr(from) && hi == reinterpret_cast<uint64_t>(mem.data()) + 19 * 16 + 10);
  }
}

namespace {

void gathered_batch_lands(bool coalesce) {
  std::vector<uint8_t> dst(4 << 20), src(4 << 20);
  auto topt = options("target", 0x3333);
  auto iopt = options("init", 0x4444);
  iopt.coalesce_writes = coalesce;
  iopt.slice_size = 64 << 10;
  Node target(topt);
  Node init(iopt);
  const uint64_t d0 = reinterpret_cast<uint64_t>(dst.data()), s0 = reinterpret_cast<uint64_t>(src.data());
  CHECK(target.t->registry().add(d0, dst.size(), true) == te::TE_OK);
  CHECK(init.t->registry().add(s0, src.size(), false) == te::TE_OK);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 13 + 5);
  const uint64_t peer = init.t->open_peer("127.0.0.1", target.t->port(), 0x3333, "target", false, 1);
  Event e;
  CHECK(init.wait(Event::OPEN, 1, &e) && e.status == te::TE_OK);

  // Request i: rows of (i % 7) * 100 + 24 bytes, pitch 3 KiB, 1 to 300 rows; request 5 is a
  // read that asks to gather (refused), request 9 runs past the registered source (refused).
  constexpr int kN = 40;
  std::vector<uint8_t> ops(kN, 1);
  std::vector<uint64_t> local(kN), remote(kN), len(kN), pitch(kN, 3072);
  std::vector<uint32_t> rows(kN);
  uint64_t to = 0;
  for (int i = 0; i < kN; ++i) {
    const uint64_t width = (i % 7) * 100 + 24;
    rows[i] = 1 + (i * 37) % 300;
    local[i] = s0 + (i * 77777) % (src.size() - (1 << 20));  // sources may overlap: rows are only read
    remote[i] = d0 + to;
    len[i] = width * rows[i];
    to += len[i] + 8;
  }
  CHECK(to < dst.size());
  ops[5] = 0;
  local[9] = s0 + src.size() - 3072;
  uint64_t id = 0;
  std::string err;
  CHECK(init.t->submit(peer, ops.data(), local.data(), remote.data(), len.data(), kN, nullptr, 0, &id, &err,
                       tetcp::BatchExtras{rows.data(), pitch.data()}) == te::TE_OK);
  CHECK(init.wait(Event::BATCH, id, &e));
  auto b = init.t->take_batch(id);
  CHECK(b != nullptr);
  std::vector<uint8_t> want(dst.size());
  for (int i = 0; b && i < kN; ++i) {
    const int32_t expect = i == 5 ? te::TE_INVALID_ARGUMENT : i == 9 ? te::TE_ADDRESS_OUT_OF_RANGE : te::TE_OK;
    CHECK(b->statuses[i].load() == expect);
    if (expect != te::TE_OK) continue;
    const uint64_t width = len[i] / rows[i];
    for (uint32_t r = 0; r < rows[i]; ++r)
      std::memcpy(want.data() + (remote[i] - d0) + r * width, src.data() + (local[i] - s0) + r * 3072, width);
  }
  CHECK(dst == want);
  init.t->close_peer(peer);
}

}  // namespace

void test_gathered_writes_land_packed() {
  gathered_batch_lands(true);
  gathered_batch_lands(false);
}
