// How a live target answers a deep window: the completions are sent as the copies finish,
// not when the initiator's next message arrives (see Server::finish and handle_requests).
// Run by shm_core_test.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "raw_client.h"
#include "socket.h"
#include "transport.h"
#include "wire.h"

using namespace teshm;

// A deep window is answered by the copies that finish (finish()), not by the initiator's
// messages: a message of requests the target admits whole, arriving while kHoldWhileQueued or
// more of the connection's copies are queued, leaves the completions waiting alone. Message 1
// carries a small request and a 64 MiB one; once the small one's completion waits (held: the
// large one is still queued), message 2 carries another small one. Answered as the rule says,
// the first completion message holds all three (the large copy's end flushes them together). A
// target that answered message 2 sends the first small completion alone. When the large copy
// ends before message 2 is read, the round proves nothing either way (the first message then
// holds the first two): at least one of five rounds must prove the rule. Each round has a
// target of its own, so that its pending_peak says when the first completion waits.
void test_messages_leave_a_deep_window_to_finish() {
  const uint64_t small = 4096, large = 64 << 20;
  std::vector<uint8_t> memory(2 * small + large), source(memory.size());
  const uint64_t base = reinterpret_cast<uint64_t>(memory.data());
  const uint64_t src = reinterpret_cast<uint64_t>(source.data());
  int proved = 0, answered_early = 0;
  for (uint64_t round = 0; round < 5 && proved == 0; ++round) {
    Options o;
    o.segment_name = "target";
    o.epoch = 83;
    o.socket_name = "te-shm-hold/" + std::to_string(getpid()) + "/" + std::to_string(round);
    Transport t(o, [](Event) {});
    std::string err;
    CHECK(t.start(&err) == te::TE_OK);
    CHECK(t.registry().add(base, memory.size(), true) == te::TE_OK);
    std::fill(memory.begin(), memory.end(), uint8_t{0});
    for (size_t b = 0; b < source.size(); ++b) source[b] = static_cast<uint8_t>(round * 7 + b % 251 + 1);
    RawClient c(o.socket_name, o.epoch);
    CHECK(c.fd >= 0);
    if (c.fd < 0) break;
    Request first[2] = {Request{1, 1, OP_WRITE, src, base, small},
                        Request{2, 1, OP_WRITE, src + 2 * small, base + 2 * small, large}};
    Request second{3, 3, OP_WRITE, src + small, base + small, small};
    std::vector<uint8_t> msg, buf;
    encode_requests(first, 2, &msg);
    CHECK(send_message(c.fd, msg) >= 0);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (t.server_stats().pending_peak == 0 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    CHECK(t.server_stats().pending_peak >= 1);
    encode_requests(&second, 1, &msg);
    CHECK(send_message(c.fd, msg) >= 0);
    std::vector<std::vector<uint64_t>> answers;  // the sequence numbers each completion message carried
    size_t answered = 0;
    Message m;
    std::string why;
    while (answered < 3 && recv_wait(c.fd, &buf, 10000) > 0 &&
           parse_message(buf.data(), buf.size(), &m, &why) == te::TE_OK) {
      answers.emplace_back();
      for (const Completion& done : m.completions) {
        CHECK(done.status == te::TE_OK);
        answers.back().push_back(done.seq);
      }
      answered += m.completions.size();
    }
    CHECK(answered == 3);
    CHECK(std::memcmp(memory.data(), source.data(), memory.size()) == 0);
    if (!answers.empty()) {
      const std::vector<uint64_t>& head = answers.front();
      if (head.size() == 3) ++proved;
      if (std::find(head.begin(), head.end(), uint64_t{2}) == head.end()) ++answered_early;
    }
    c.drop();
    t.close();
  }
  std::printf("  a deep window: %d round(s) answered whole by its copies, %d answered by a message\n", proved,
              answered_early);
  CHECK(answered_early == 0);
  CHECK(proved >= 1);
}
