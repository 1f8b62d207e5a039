// libFuzzer target: the fabric control-message parsers (header, region table, notification,
// answers such as NOTIFY_ACK)
// exactly as the rail threads call them on received bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "wire.h"

using namespace te::fabric;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  wire::Header h;
  size_t off = 0;
  if (!wire::get_header(data, size, &h, &off)) return 0;
  wire::Reader rd{data, size, off};
  switch (h.type) {
    case wire::TABLE: {
      std::vector<wire::TableEntry> regions;
      if (wire::get_table(rd, &regions)) {
        // What the caller does with an accepted table: every entry has a key to address it with.
        for (auto& e : regions)
          if (e.keys.empty()) __builtin_trap();
      }
      break;
    }
    case wire::NOTIFY: {
      std::string from;
      const uint8_t* payload = nullptr;
      uint32_t len = 0;
      if (wire::get_notify(rd, &from, &payload, &len)) {
        volatile uint8_t sink = 0;
        for (uint32_t i = 0; i < len; ++i) sink ^= payload[i];  // the whole payload lies inside the message
        (void)sink;
      }
      break;
    }
    case wire::NOTIFY_ACK:
    case wire::REVOKE_ACK: {
      // Answers: the header is the whole message (req_id and status); a body is ignored.
      volatile int32_t status = h.status;
      (void)status;
      break;
    }
    default: {
      uint16_t nl = rd.u16();
      (void)rd.str(nl);  // HELLO's name
      break;
    }
  }
  return 0;
}
