// A hostile same-user initiator that floods refused requests (and refused notifications)
// and never reads its socket: the target stops reading that connection while its unread
// completions pile up (back-pressure), so what it holds for the peer stays bounded, other
// peers keep being served, and nothing is lost once the peer reads again.
// Built and run by test/backpressure.test.ts (no N-API: the core is linked directly).
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "control_page.h"
#include "raw_client.h"
#include "socket.h"
#include "transport.h"
#include "wire.h"

using namespace teshm;

struct Initiator {
  int fd = -1;
  int ctl = -1;
  ControlPage* page = nullptr;
  uint8_t nonce[16] = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6};
  /** Connects and completes HELLO as a real initiator would (same process, so the probe reads). */
  bool hello(const std::string& socket, uint64_t epoch, const std::string& name) {
    std::string err;
    if (connect_abstract(socket, 1000, &fd, &err) != te::TE_OK) return false;
    if (create_control_page(&ctl, &page, &err) != te::TE_OK) return false;
    Hello h;
    h.expected_epoch = epoch;
    h.probe_addr = reinterpret_cast<uint64_t>(nonce);
    std::memcpy(h.nonce, nonce, 16);
    h.name = name;
    std::vector<uint8_t> msg, buf;
    encode_hello(h, &msg);
    if (send_message(fd, msg, ctl) < 0) return false;
    Message m;
    std::string why;
    return recv_wait(fd, &buf) > 0 && parse_message(buf.data(), buf.size(), &m, &why) == te::TE_OK &&
           m.type == HELLO_REPLY && m.reply.status == te::TE_OK;
  }
  /**
   * Sends `msgs` datagrams (built by `make`) without reading anything; stops when the socket
   * stayed full for `stall_ms`. Returns how many were sent.
   */
  template <typename Make>
  size_t flood(size_t msgs, int stall_ms, Make make) {
    std::vector<uint8_t> msg;
    size_t sent = 0;
    int64_t last_progress = now_ms();
    while (sent < msgs) {
      make(sent, &msg);
      if (send_message(fd, msg) >= 0) {
        ++sent;
        last_progress = now_ms();
        continue;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK) break;
      if (now_ms() - last_progress > stall_ms) break;
      usleep(500);
    }
    return sent;
  }
  /** Reads completions until `want` arrived or nothing came for 3 s; counts those with `status`. */
  size_t drain(size_t want, int32_t status, size_t* with_status) {
    std::vector<uint8_t> buf;
    Message m;
    std::string why;
    size_t got = 0;
    *with_status = 0;
    while (got < want && recv_wait(fd, &buf, 3000) > 0 &&
           parse_message(buf.data(), buf.size(), &m, &why) == te::TE_OK && m.type == COMPLETIONS) {
      got += m.completions.size();
      for (auto& c : m.completions) *with_status += c.status == status;
    }
    return got;
  }
  ~Initiator() {
    if (fd >= 0) close(fd);
    unmap_control_page(page);
    if (ctl >= 0) close(ctl);
  }
};

// What the target may hold for one connection that reads nothing (server.cpp, kPendingPauseAt):
// the pause threshold, one more message's requests, and the copies it may have in flight.
static size_t pending_bound(const Options& o) { return 4096 + kMaxRequestsPerMessage + o.max_outstanding; }

static void test_refused_request_flood() {
  Options o;
  o.segment_name = "target";
  o.epoch = 91;
  o.socket_name = "te-shm-backpressure/" + std::to_string(getpid());
  Transport t(o, [](Event) {});
  std::string err;
  CHECK(t.start(&err) == te::TE_OK);
  std::vector<uint8_t> memory(1 << 16, 0), src(4096, 0x5A);
  CHECK(t.registry().add(reinterpret_cast<uint64_t>(memory.data()), memory.size(), true) == te::TE_OK);

  Initiator hostile;
  CHECK(hostile.hello(o.socket_name, o.epoch, "hostile"));
  // Every request targets unregistered memory: refused at once, never counted as outstanding.
  std::vector<Request> reqs(kMaxRequestsPerMessage);
  const size_t kMsgs = 400;  // 546,000 refused requests; ~8.7 MB of completions if all were kept
  size_t sent = hostile.flood(kMsgs, 500, [&](size_t i, std::vector<uint8_t>* msg) {
    for (size_t k = 0; k < reqs.size(); ++k)
      reqs[k] = Request{i * reqs.size() + k + 1, i + 1, OP_WRITE, reinterpret_cast<uint64_t>(src.data()), 0x10, 16};
    encode_requests(reqs.data(), reqs.size(), msg);
  });
  usleep(200 * 1000);  // let the target read whatever it will read
  ServerStats s = t.server_stats();
  std::printf("  refused-request flood: sent %zu of %zu datagrams; pending peak %llu (bound %zu), read pauses %llu\n",
              sent, kMsgs, static_cast<unsigned long long>(s.pending_peak), pending_bound(o),
              static_cast<unsigned long long>(s.read_pauses));
  CHECK(s.pending_peak <= pending_bound(o));
  CHECK(s.read_pauses >= 1);
  CHECK(sent < kMsgs);  // the peer was held back, not served forever

  // Another initiator is served normally meanwhile.
  Initiator honest;
  CHECK(honest.hello(o.socket_name, o.epoch, "honest"));
  Request good{1, 1, OP_WRITE, reinterpret_cast<uint64_t>(src.data()), reinterpret_cast<uint64_t>(memory.data()), 4096};
  std::vector<uint8_t> msg;
  encode_requests(&good, 1, &msg);
  CHECK(send_message(honest.fd, msg) >= 0);
  size_t ok = 0;
  CHECK(honest.drain(1, te::TE_OK, &ok) == 1 && ok == 1);
  CHECK(memory[0] == 0x5A && memory[4095] == 0x5A && memory[4096] == 0);

  // The hostile peer reads at last: every request it managed to send is answered, refused.
  size_t refused = 0;
  size_t got = hostile.drain(sent * reqs.size(), te::TE_MEMORY_NOT_REGISTERED, &refused);
  std::printf("  after draining: %zu completions of %zu requests\n", got, sent * reqs.size());
  CHECK(got == sent * reqs.size() && refused == got);
  t.close();
}

// Refused notifications feed the same queue: past notify_queue_per_peer each NOTIFY is
// answered POOL_EXHAUSTED (the sink here never takes one off the queue).
static void test_refused_notify_flood() {
  Options o;
  o.segment_name = "target";
  o.epoch = 92;
  o.socket_name = "te-shm-backpressure-notify/" + std::to_string(getpid());
  o.notify_queue_per_peer = 4;
  Transport t(o, [](Event) {});
  std::string err;
  CHECK(t.start(&err) == te::TE_OK);
  Initiator hostile;
  CHECK(hostile.hello(o.socket_name, o.epoch, "hostile"));
  const size_t kMsgs = 100000;
  uint8_t payload[1] = {1};
  size_t sent =
      hostile.flood(kMsgs, 500, [&](size_t i, std::vector<uint8_t>* msg) { encode_notify(i + 1, payload, 1, msg); });
  usleep(200 * 1000);
  ServerStats s = t.server_stats();
  std::printf("  refused-notify flood: sent %zu of %zu datagrams; pending peak %llu, read pauses %llu\n", sent, kMsgs,
              static_cast<unsigned long long>(s.pending_peak), static_cast<unsigned long long>(s.read_pauses));
  CHECK(s.pending_peak <= pending_bound(o));
  CHECK(s.read_pauses >= 1);
  CHECK(sent < kMsgs);
  size_t refused = 0;
  CHECK(hostile.drain(sent, te::TE_POOL_EXHAUSTED, &refused) == sent);
  CHECK(refused == sent - 4);
  t.close();
}

int main() {
  test_refused_request_flood();
  test_refused_notify_flood();
  if (failures) {
    std::fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  std::printf("mooncake-shm back-pressure tests passed\n");
  return 0;
}
