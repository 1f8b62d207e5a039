// Control messages between te_fabric endpoints (FI_MSG sends on the data endpoints).
// Little-endian, versioned; every message names its sender's rail address so the
// receiver can answer without FI_SOURCE support.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "te/fabric/protocol.h"

namespace te::fabric::wire {

constexpr uint32_t kMagic = 0x42464554;  // "TEFB"
// 2: NOTIFY is acknowledged (NOTIFY_ACK). The descriptor advertises the version, so openPeer
// refuses a peer of another one (PROTOCOL_MISMATCH); a message of another version that
// arrives anyway is dropped (get_header).
constexpr uint16_t kVersion = kProtocolVersion;
constexpr size_t kMaxMessage = 64 * 1024 + 4096;  // receive buffer size
constexpr size_t kMaxPayload = 64 * 1024;         // notification payload limit

enum Type : uint8_t {
  HELLO = 1,       // open a channel (req_id; target_epoch = the epoch the sender expects)
  HELLO_ACK = 2,   // status OK or STALE_DESCRIPTOR
  TABLE_REQ = 3,   // ask for the published region table
  TABLE = 4,       // a chunk of it (last chunk has flags & kLast)
  REVOKE = 5,      // a region was unregistered (addr in arg)
  NOTIFY = 6,      // a notification (after the batch's data)
  REVOKE_ACK = 7,  // the peer dropped the region from its cache (req_id of the REVOKE)
  NOTIFY_ACK = 8,  // answer to a NOTIFY (req_id of it): status OK (queued for the listeners),
                   // POOL_EXHAUSTED (over the receiver's budget), STALE_DESCRIPTOR, BAD_FRAME
};
constexpr uint8_t kLast = 1;

struct Header {
  uint8_t type = 0;
  uint8_t flags = 0;
  uint16_t rail = 0;  // sender's rail index
  int32_t status = 0;
  uint64_t req_id = 0;
  uint64_t sender_epoch = 0;
  uint64_t target_epoch = 0;
  uint64_t arg = 0;
  std::vector<uint8_t> sender_addr;
};

/** Appends a header; returns the offset where the body starts. */
void put_header(std::vector<uint8_t>& out, const Header& h);
/** Parses a header; false for a malformed message. `body` is set to the body offset. */
bool get_header(const uint8_t* data, size_t len, Header* h, size_t* body);

void put_u16(std::vector<uint8_t>& o, uint16_t v);
void put_u32(std::vector<uint8_t>& o, uint32_t v);
void put_u64(std::vector<uint8_t>& o, uint64_t v);
void put_bytes(std::vector<uint8_t>& o, const void* p, size_t n);

struct Reader {
  const uint8_t* p;
  size_t n, off;
  bool ok = true;
  uint16_t u16();
  uint32_t u32();
  uint64_t u64();
  std::string str(size_t len);
  const uint8_t* bytes(size_t len);
};

/** One region of a TABLE chunk: start, length, base of its registration, one key per rail. */
struct TableEntry {
  uint64_t addr = 0, length = 0, base = 0;
  std::vector<uint64_t> keys;
};

/** TABLE body: u16 keys per region (at least 1) | u32 count | count × (addr, length, base, keys). False when malformed.
 */
bool get_table(Reader& r, std::vector<TableEntry>* out);
/** NOTIFY body: u16 name length | name | u32 payload length | payload (at most kMaxPayload). False when malformed. */
bool get_notify(Reader& r, std::string* from, const uint8_t** payload, uint32_t* payload_len);

}  // namespace te::fabric::wire
