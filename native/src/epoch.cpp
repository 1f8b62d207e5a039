#include "te/epoch.h"

#include <sys/random.h>

#include <chrono>
#include <cstdio>
#include <cstring>

namespace te {

bool random_bytes(void* out, unsigned long n) {
  auto* p = static_cast<unsigned char*>(out);
  unsigned long done = 0;
  while (done < n) {
    ssize_t r = getrandom(p + done, n - done, 0);
    if (r <= 0) break;
    done += static_cast<unsigned long>(r);
  }
  if (done == n) return true;
  FILE* f = std::fopen("/dev/urandom", "rb");
  if (!f) return false;
  size_t got = std::fread(p + done, 1, n - done, f);
  std::fclose(f);
  return got == n - done;
}

static uint64_t draw_epoch() {
  uint64_t e = 0;
  if (!random_bytes(&e, sizeof e)) {
    e = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) * 0x9E3779B97F4A7C15ull;
  }
  return e == 0 ? 1 : e;
}

uint64_t process_epoch() {
  static const uint64_t epoch = draw_epoch();
  return epoch;
}

}  // namespace te
