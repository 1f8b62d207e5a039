// C++ tests of scattered writes (WRITE_ROWS frames, strided_rows.h): a row table checked
// against its span, and a batch of scattered writes between two transport cores (slices that
// start inside a row, rows on both sides, more rows than one receive takes) whose bytes land
// in their rows and nowhere else, with refusals that are their own request's.
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

// A row table names rows that fill the span exactly: anything else is refused.
void test_row_table_of_span() {
  StridedRows r;
  uint64_t capacity = 0;
  CHECK(StridedRows::of_span(4096, 9 * 1024 + 500, 500, 1024, &r, &capacity) == te::TE_OK);
  CHECK(capacity == 10 * 500 && r.base == 4096 && r.width == 500 && r.pitch == 1024);
  CHECK(r.extent(capacity) == 9 * 1024 + 500);
  CHECK(StridedRows::of_span(4096, 9 * 1024 + 499, 500, 1024, &r, &capacity) ==
        te::TE_INVALID_ARGUMENT);  // not whole rows
  CHECK(StridedRows::of_span(4096, 9 * 1024 + 500, 500, 400, &r, &capacity) == te::TE_INVALID_ARGUMENT);  // overlap
  CHECK(StridedRows::of_span(4096, 500, 500, 1024, &r, &capacity) == te::TE_INVALID_ARGUMENT);  // one row: a WRITE
  CHECK(StridedRows::of_span(4096, 1024, 0, 1024, &r, &capacity) == te::TE_INVALID_ARGUMENT);   // width 0
  CHECK(StridedRows::of_span(UINT64_MAX - 100, 2048, 1024, 1024, &r, &capacity) == te::TE_INVALID_ARGUMENT);  // wraps
  // copy_in writes packed bytes [from, +len) into the rows and nothing between them.
  std::vector<uint8_t> mem(10 * 16, 0xee), src(100);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i + 1);
  const StridedRows rows{reinterpret_cast<uint64_t>(mem.data()), 10, 16};
  rows.copy_in(7, 50, src.data());
  for (size_t at = 0; at < mem.size(); ++at) {
    const uint64_t row = at / 16, col = at % 16, packed = row * 10 + col;
    const bool in = col < 10 && packed >= 7 && packed < 57;
    CHECK(mem[at] == (in ? src[packed - 7] : 0xee));
  }
}

namespace {

void scattered_batch_lands(bool coalesce) {
  std::vector<uint8_t> dst(16 << 20, 0xee), src(4 << 20);
  auto topt = options("target", 0x5555);
  auto iopt = options("init", 0x6666);
  iopt.coalesce_writes = coalesce;
  iopt.slice_size = 64 << 10;
  Node target(topt);
  Node init(iopt);
  const uint64_t d0 = reinterpret_cast<uint64_t>(dst.data()), s0 = reinterpret_cast<uint64_t>(src.data());
  CHECK(target.t->registry().add(d0, dst.size(), true) == te::TE_OK);
  CHECK(init.t->registry().add(s0, src.size(), false) == te::TE_OK);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 29 + 3);
  const uint64_t peer = init.t->open_peer("127.0.0.1", target.t->port(), 0x5555, "target", false, 1);
  Event e;
  CHECK(init.wait(Event::OPEN, 1, &e) && e.status == te::TE_OK);

  // Request i: rows of (i % 7) * 100 + 24 bytes, 3 KiB apart at the target, 2 to 151 rows
  // (request 7: 1100 rows, more than one receive takes); every third also gathers its rows
  // locally (2 KiB apart). Request 5 is a read that asks
  // to scatter (refused here), request 9's rows run past the target's region (refused there).
  constexpr int kN = 30;
  std::vector<uint8_t> ops(kN, 1);
  std::vector<uint64_t> local(kN), remote(kN), len(kN), rpitch(kN, 3072), lpitch(kN, 2048);
  std::vector<uint32_t> rrows(kN), lrows(kN, 1);
  uint64_t to = 0;
  for (int i = 0; i < kN; ++i) {
    const uint64_t width = (i % 7) * 100 + 24;
    rrows[i] = i == 7 ? 1100 : 2 + (i * 37) % 150;
    if (i % 3 == 0) lrows[i] = rrows[i];
    local[i] = s0 + (i * 77777) % (src.size() - (3 << 20));
    remote[i] = d0 + to;
    len[i] = width * rrows[i];
    to += (rrows[i] - 1) * 3072 + width + 8;
  }
  CHECK(to < dst.size());
  ops[5] = 0;
  remote[9] = d0 + dst.size() - 3072;
  uint64_t id = 0;
  std::string err;
  CHECK(init.t->submit(peer, ops.data(), local.data(), remote.data(), len.data(), kN, nullptr, 0, &id, &err,
                       BatchExtras{lrows.data(), lpitch.data(), rrows.data(), rpitch.data()}) == te::TE_OK);
  CHECK(init.wait(Event::BATCH, id, &e));
  auto b = init.t->take_batch(id);
  CHECK(b != nullptr);
  std::vector<uint8_t> want(dst.size(), 0xee);
  for (int i = 0; b && i < kN; ++i) {
    const int32_t expect = i == 5 ? te::TE_INVALID_ARGUMENT : i == 9 ? te::TE_ADDRESS_OUT_OF_RANGE : te::TE_OK;
    CHECK(b->statuses[i].load() == expect);
    if (expect != te::TE_OK) continue;
    const uint64_t width = len[i] / rrows[i];
    for (uint32_t r = 0; r < rrows[i]; ++r) {
      const uint64_t from = (local[i] - s0) + (lrows[i] > 1 ? r * 2048 : r * width);
      std::memcpy(want.data() + (remote[i] - d0) + r * 3072, src.data() + from, width);
    }
  }
  CHECK(dst == want);
  init.t->close_peer(peer);
}

}  // namespace

void test_scattered_writes_land_in_rows() {
  scattered_batch_lands(true);
  scattered_batch_lands(false);
}
