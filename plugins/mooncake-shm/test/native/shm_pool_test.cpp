// C++ tests of mooncake-shm's pool memory (native/pools.h) without N-API: the POOL and
// POOL_GONE messages, the copy that replaces process_vm_* at every alignment, the memfd's
// seals, what a target refuses to map, and a live target answering a raw client that
// announces pools honestly and otherwise.
//   shm_pool_test     every case (run by scripts/native-test.sh after the core tests)
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "control_page.h"
#include "copy.h"
#include "pools.h"
#include "socket.h"
#include "transport.h"
#include "wire.h"

using namespace teshm;

static te::Status parse(const std::vector<uint8_t>& b, Message* m) {
  std::string why;
  return parse_message(b.data(), b.size(), m, &why);
}

static void test_wire() {
  std::vector<uint8_t> b;
  Message m;
  encode_pool(PoolAd{3, 0x7f0000000000, 1 << 20}, &b);
  CHECK(parse(b, &m) == te::TE_OK && m.type == POOL && m.pool.id == 3 && m.pool.base == 0x7f0000000000 &&
        m.pool.len == (1 << 20));
  encode_pool_gone(3, &b);
  CHECK(parse(b, &m) == te::TE_OK && m.type == POOL_GONE && m.pool.id == 3);
  Request r{1, 2, OP_READ, 0x1000, 0x2000, 64, 9};
  encode_requests(&r, 1, &b);
  CHECK(parse(b, &m) == te::TE_OK && m.requests[0].pool == 9 && m.requests[0].op == OP_READ &&
        m.requests[0].initiator_addr == 0x1000);
  // Malformed: id 0, no bytes, a range past the end of the address space, wrong lengths.
  for (PoolAd bad : {PoolAd{0, 0x1000, 64}, PoolAd{1, 0x1000, 0}, PoolAd{1, ~0ull - 10, 64}}) {
    encode_pool(bad, &b);
    CHECK(parse(b, &m) == te::TE_BAD_FRAME);
  }
  encode_pool(PoolAd{1, 0x1000, 64}, &b);
  b.push_back(0);
  CHECK(parse(b, &m) == te::TE_BAD_FRAME);
  b.resize(b.size() - 2);
  CHECK(parse(b, &m) == te::TE_BAD_FRAME);
  encode_pool_gone(0, &b);
  CHECK(parse(b, &m) == te::TE_BAD_FRAME);
  encode_pool_gone(1, &b);
  b.pop_back();
  CHECK(parse(b, &m) == te::TE_BAD_FRAME);
}

// copy_mapped aligns the destination itself: every source and destination offset, lengths
// around its 16- and 64-byte steps and around 32 KiB, where it switches to streaming
// stores, and not a byte outside the range touched.
static void test_copy_alignments() {
  std::vector<uint8_t> src(48 << 10), dst((48 << 10) + 256);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
  const size_t k = 32 << 10;  // where streaming stores begin
  const size_t lengths[] = {0, 1, 15, 16, 17, 63, 64, 65, 127, 1000, 4096 + 13, k - 1, k + 7, k + 16, k + 8269};
  int bad = 0;
  for (size_t so = 0; so < 16; ++so)
    for (size_t d = 0; d < 64; ++d)
      for (size_t len : lengths)
        for (uint8_t op : {OP_WRITE, OP_READ}) {
          std::fill(dst.begin(), dst.end(), 0xEE);
          uint8_t* local = dst.data() + 64 + d;
          std::vector<uint8_t> peer(src.begin(), src.end());
          if (op == OP_WRITE) {
            copy_mapped(op, reinterpret_cast<uint64_t>(local), peer.data() + so, len);
            bad += std::memcmp(local, src.data() + so, len) != 0;
            bad += std::any_of(dst.begin(), dst.begin() + 64 + d, [](uint8_t x) { return x != 0xEE; });
            bad += std::any_of(dst.begin() + 64 + d + len, dst.end(), [](uint8_t x) { return x != 0xEE; });
          } else {
            std::memcpy(local, src.data(), len);
            copy_mapped(op, reinterpret_cast<uint64_t>(local), peer.data() + so, len);
            bad += std::memcmp(peer.data() + so, src.data(), len) != 0;
            bad += std::memcmp(peer.data(), src.data(), so) != 0;
            bad += std::memcmp(peer.data() + so + len, src.data() + so + len, src.size() - so - len) != 0;
          }
        }
  CHECK(bad == 0);
}

static void test_local_pools() {
  LocalPools pools;
  std::shared_ptr<LocalPool> p;
  std::string err;
  CHECK(pools.allocate(0, &p, &err) == te::TE_INVALID_ARGUMENT);
  CHECK(pools.allocate(1 << 20, &p, &err) == te::TE_OK && p && p->id != 0 && p->fd >= 0);
  // Sealed: the memfd cannot shrink under a target that mapped it.
  CHECK((fcntl(p->fd, F_GET_SEALS) & F_SEAL_SHRINK) != 0);
  CHECK(ftruncate(p->fd, 4096) != 0 && errno == EPERM);
  auto* bytes = reinterpret_cast<uint8_t*>(p->base);
  bytes[0] = 1;
  bytes[p->len - 1] = 2;  // mapped, writable
  CHECK(pools.find(p->base, p->len) == p);
  CHECK(pools.find(p->base + p->len - 1, 1) == p);
  CHECK(pools.find(p->base + p->len, 1) == nullptr);
  CHECK(pools.find(p->base + 8, p->len) == nullptr);  // runs past the end
  CHECK(pools.find(p->base - 1, 2) == nullptr);
  std::shared_ptr<LocalPool> q;
  CHECK(pools.allocate(4096, &q, &err) == te::TE_OK && q->id != p->id);
  CHECK(pools.release(p->base) == p);
  CHECK(pools.release(p->base) == nullptr);
  CHECK(pools.find(p->base, 1) == nullptr && pools.find(q->base, 1) == q);
}

static void test_map_refusals() {
  std::shared_ptr<PeerPool> m;
  std::string why;
  int pipefd[2];
  CHECK(pipe(pipefd) == 0);
  CHECK(map_peer_pool(pipefd[0], 0x1000, 4096, &m, &why) == te::TE_BAD_FRAME && !m);
  close(pipefd[0]);
  close(pipefd[1]);
  int unsealed = memfd_create("unsealed", MFD_CLOEXEC);
  CHECK(ftruncate(unsealed, 4096) == 0);
  CHECK(map_peer_pool(unsealed, 0x1000, 4096, &m, &why) == te::TE_BAD_FRAME && !m);
  close(unsealed);
  LocalPools pools;
  std::shared_ptr<LocalPool> p;
  std::string err;
  CHECK(pools.allocate(8192, &p, &err) == te::TE_OK);
  CHECK(map_peer_pool(p->fd, p->base, 3 * 8192, &m, &why) == te::TE_BAD_FRAME && !m);  // announces more than it has
  uint64_t before = peer_pools_mapped();
  reinterpret_cast<uint8_t*>(p->base)[100] = 0x42;
  CHECK(map_peer_pool(p->fd, p->base, 8192, &m, &why) == te::TE_OK && m && m->at(p->base + 100)[0] == 0x42);
  CHECK(m->holds(p->base, 8192) && !m->holds(p->base + 1, 8192) && !m->holds(p->base - 1, 1));
  CHECK(peer_pools_mapped() == before + 1);
  m.reset();
  CHECK(peer_pools_mapped() == before);
}

void test_live_pools();  // shm_pool_live_test.cpp

int main() {
  test_wire();
  test_copy_alignments();
  test_local_pools();
  test_map_refusals();
  test_live_pools();
  if (failures) {
    std::fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  std::printf("mooncake-shm pool tests passed\n");
  return 0;
}
