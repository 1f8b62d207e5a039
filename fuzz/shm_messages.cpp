// libFuzzer target: mooncake-shm's datagram parser (the only code that reads bytes a
// same-host peer sent). Anything it accepts must survive a round trip: re-encoded, it
// parses to the same message, so the encoder and the parser agree on every accepted shape.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "wire.h"

using namespace teshm;

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}

std::vector<uint8_t> encode(const Message& m) {
  std::vector<uint8_t> out;
  switch (m.type) {
    case HELLO:
      encode_hello(m.hello, &out);
      break;
    case HELLO_REPLY:
      encode_hello_reply(m.reply, &out);
      break;
    case REQUESTS:
      encode_requests(m.requests.data(), m.requests.size(), &out);
      break;
    case CANCEL:
      encode_cancel(m.cancel_batch, &out);
      break;
    case COMPLETIONS:
      encode_completions(m.completions.data(), m.completions.size(), &out);
      break;
    case NOTIFY:
      encode_notify(m.notify_seq, m.notify.data(), m.notify.size(), &out);
      break;
    case POOL:
      encode_pool(m.pool, &out);
      break;
    case POOL_GONE:
      encode_pool_gone(m.pool.id, &out);
      break;
  }
  return out;
}

bool same(const Message& a, const Message& b) {
  if (a.type != b.type) return false;
  switch (a.type) {
    case HELLO:
      return a.hello.expected_epoch == b.hello.expected_epoch && a.hello.probe_addr == b.hello.probe_addr &&
             std::string(reinterpret_cast<const char*>(a.hello.nonce), 16) ==
                 std::string(reinterpret_cast<const char*>(b.hello.nonce), 16) &&
             a.hello.name == b.hello.name;
    case HELLO_REPLY:
      return a.reply.status == b.reply.status && a.reply.max_outstanding == b.reply.max_outstanding &&
             a.reply.message == b.reply.message;
    case REQUESTS:
      if (a.requests.size() != b.requests.size()) return false;
      for (size_t i = 0; i < a.requests.size(); ++i) {
        const Request &x = a.requests[i], &y = b.requests[i];
        if (x.seq != y.seq || x.batch != y.batch || x.op != y.op || x.initiator_addr != y.initiator_addr ||
            x.target_addr != y.target_addr || x.len != y.len || x.pool != y.pool)
          return false;
      }
      return true;
    case CANCEL:
      return a.cancel_batch == b.cancel_batch;
    case COMPLETIONS:
      if (a.completions.size() != b.completions.size()) return false;
      for (size_t i = 0; i < a.completions.size(); ++i)
        if (a.completions[i].seq != b.completions[i].seq || a.completions[i].status != b.completions[i].status)
          return false;
      return true;
    case NOTIFY:
      return a.notify_seq == b.notify_seq && a.notify == b.notify;
    case POOL:
      return a.pool.id == b.pool.id && a.pool.base == b.pool.base && a.pool.len == b.pool.len;
    case POOL_GONE:
      return a.pool.id == b.pool.id;
  }
  return false;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Message m;
  std::string why;
  if (parse_message(data, size, &m, &why) != te::TE_OK) {
    check(!why.empty());  // a refusal always says why
    return 0;
  }
  check(size <= kMaxMessage);
  std::vector<uint8_t> again = encode(m);
  Message m2;
  std::string why2;
  check(parse_message(again.data(), again.size(), &m2, &why2) == te::TE_OK);
  check(same(m, m2));
  return 0;
}
