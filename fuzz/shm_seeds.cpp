// Writes the committed seed corpus of the shm_messages fuzz target (one valid datagram of
// each type, made by the real encoders):
//   g++ -std=c++17 -Iplugins/mooncake-shm/native -Inative/include fuzz/shm_seeds.cpp \
//     plugins/mooncake-shm/native/wire.cpp native/src/status.cpp -o /tmp/shm_seeds && /tmp/shm_seeds
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "wire.h"
using namespace teshm;
static void put(const char* name, const std::vector<uint8_t>& b) {
  std::string p = std::string("fuzz/corpus/shm_messages/") + name;
  FILE* f = fopen(p.c_str(), "wb");
  fwrite(b.data(), 1, b.size(), f);
  fclose(f);
}
int main() {
  std::vector<uint8_t> out;
  Hello h;
  h.expected_epoch = 0x1122334455667788ull;
  h.probe_addr = 0x7f0000001000ull;
  for (int i = 0; i < 16; ++i) h.nonce[i] = uint8_t(i);
  h.name = "127.0.0.1:15001";
  encode_hello(h, &out);
  put("hello", out);
  HelloReply r;
  r.status = 0;
  r.max_outstanding = 1024;
  r.message = "ok";
  encode_hello_reply(r, &out);
  put("hello_reply", out);
  r.status = -201;
  r.message = "stale epoch";
  encode_hello_reply(r, &out);
  put("hello_reply_refused", out);
  Request q[3] = {{1, 7, OP_WRITE, 0x7f0000100000ull, 0x7f0000200000ull, 4096},
                  {2, 7, OP_READ, 0x7f0000101000ull, 0x7f0000201000ull, 1 << 20},
                  {3, 8, OP_WRITE, 1, 2, 1, 5}};
  encode_requests(q, 3, &out);
  put("requests", out);
  encode_cancel(7, &out);
  put("cancel", out);
  Completion c[2] = {{1, 0}, {2, -2}};
  encode_completions(c, 2, &out);
  put("completions", out);
  const char* note = "layer 3 ready";
  encode_notify(9, reinterpret_cast<const uint8_t*>(note), strlen(note), &out);
  put("notify", out);
  encode_pool(PoolAd{5, 0x7f0000100000ull, 64 << 20}, &out);
  put("pool", out);
  encode_pool_gone(5, &out);
  put("pool_gone", out);
  return 0;
}
