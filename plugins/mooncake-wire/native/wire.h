// Mooncake Transfer Engine's TCP data-path framing (its ServerSession/ClientSession), written
// from the protocol description, not from its code. Little-endian on the wire.
//
//   request header, 24 bytes: u64 size | u64 addr | u8 opcode | 7 bytes padding (ignored)
//   opcode bits 0-6: 1 = WRITE, anything else = READ (as the reference target does);
//   bit 7 = v2 framing, which adds an 8-byte status frame: after the applied body of a WRITE,
//   before the body of a READ. v1 has no reply channel: a rejection closes the connection.
//   status frame: u64, high 32 bits "MCTV" (0x4D435456), low 32 bits the code (0 OK, 1 rejected).
#pragma once

#include <cstddef>
#include <cstdint>

namespace mcwire {

constexpr size_t kHeaderBytes = 24;
constexpr size_t kStatusBytes = 8;
constexpr uint8_t kOpRead = 0;
constexpr uint8_t kOpWrite = 1;
constexpr uint8_t kV2Flag = 0x80;
constexpr uint64_t kStatusMagic = 0x4D435456ull << 32;
constexpr uint64_t kStatusOk = kStatusMagic | 0;
constexpr uint64_t kStatusAddrRejected = kStatusMagic | 1;

struct Header {
  uint64_t size = 0;
  uint64_t addr = 0;
  bool write = false;
  bool v2 = false;
};

/** Fills 24 bytes (padding zeroed, as a careful sender should). */
void encode_header(const Header& h, uint8_t out[kHeaderBytes]);
/** Reads 24 bytes; never fails: every byte pattern is some request (validation is the target's job). */
Header decode_header(const uint8_t in[kHeaderBytes]);

void encode_status(uint64_t status, uint8_t out[kStatusBytes]);
uint64_t decode_status(const uint8_t in[kStatusBytes]);
/** Whether a status frame carries the magic (anything else means the stream is desynchronised). */
inline bool status_valid(uint64_t s) { return (s & 0xFFFFFFFF00000000ull) == kStatusMagic; }

void put_le64(uint8_t* p, uint64_t v);
uint64_t get_le64(const uint8_t* p);

}  // namespace mcwire
