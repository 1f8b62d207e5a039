// The mooncake-tcp wire format. Every frame starts with a 56-byte little-endian header:
//
//   off size field
//     0    4 magic    "TETC" (0x43544554 read as LE u32)
//     4    2 version  protocol version (1)
//     6    1 op       request op, or request op | 0x80 for its response
//     7    1 flags    kFlagDigest on a verified write and on its answer, else 0
//     8    4 status   int32 te status (responses), 0 in requests
//    12    4 reserved 0
//    16    8 id       request id, echoed by the response
//    24    8 addr     target address (WRITE/READ), expected target epoch (HELLO, always checked),
//                     target epoch (HELLO_ACK)
//    32    8 length   body bytes following the header
//    40    8 span_addr   start of the whole request this slice belongs to (WRITE/READ)
//    48    8 span_length length of that request: the target validates the whole span, so a
//                        request crossing the end of a region is refused in every slice
//                        and no byte of it lands
//
// WRITE carries `length` body bytes (sent straight from registered memory) and is answered
// by WRITE_ACK after the bytes were applied. READ has no body; READ_RESP carries the
// status and, when OK, `length` bytes. Responses on a connection come in request order.
//
// REVOKE carries the 16-byte HELLO nonce of another connection from the same initiator
// (by name) to this target, which that initiator has reset. The target answers status 0
// once nothing more received on that connection can be applied: it has closed it (or it
// was gone already), and no copy into registered memory from it is still running. An
// initiator sends it first on a fresh connection after it reset one to cancel a batch, and
// settles the cancelled slices only on the answer: bytes of the reset connection that were
// still on the way (the reset travels behind them) are then discarded, not applied after
// the batch settled. Targets say they answer REVOKE in HELLO_ACK (kFeatureRevoke).
//
// WRITEV carries several WRITEs (segments) in one frame, so many small requests cost one
// header, one answer and, at the target, one receive for a run of them. Its header has
// `addr` = the segment count n (1..kMaxSegments) and `length` = the body's bytes: a table
// of n 32-byte entries (u64 addr | u64 length | u64 span_addr | u64 span_length, each a
// WRITE's own fields), then the segments' bytes in table order. Each segment is checked
// and applied as its own WRITE would be, so one refused segment does not stop the others.
// WRITEV_ACK has status 0 and no body when every segment applied; otherwise its status is
// the first failure and its body n little-endian int32 statuses, one per segment. Targets
// say they take WRITEV in HELLO_ACK (kFeatureWriteV); initiators send it to no other.
//
// WRITE_ROWS is a WRITE whose bytes land as strided rows at the target (a head slice into
// NHD KV pages that hold more heads per token than the sender has). Its header has `addr` =
// where this slice's bytes start within the request's packed bytes, `span_addr` = the
// request's first row, `span_length` = from there to the end of its last row, and `length`
// = a 16-byte row table (u64 width | u64 pitch) plus the slice's bytes, which follow the
// table. The target checks the whole span as a WRITE's, refuses rows that overlap, do not
// make the span or do not hold the slice (INVALID_ARGUMENT, the bytes drained), and
// receives the bytes straight into the rows (host memory only: MEMORY_KIND_UNSUPPORTED
// otherwise). Answered as a WRITE. Targets say they take it in HELLO_ACK (kFeatureRows);
// initiators send it to no other.
// Verified writes (capabilities.verifiedWrites): a WRITE, WRITEV or WRITE_ROWS request with
// kFlagDigest in `flags` asks the target for the 64-bit XXH3 digest (te/digest.h) of the
// bytes that landed, taken as they landed. Its answer, when the status is OK, has kFlagDigest
// set and the digest in `addr` (WRITE_ACK, WRITE_ROWS' answer); a WRITEV_ACK with the flag
// carries n u64 digests, one per segment in table order, after the n int32 statuses when it
// reports a failure (digest 0 for a failed segment). The initiator compares each with the
// digest it took of the bytes it sent, and fails the write with DATA_CORRUPTED where they
// differ. Targets say they take the flag in HELLO_ACK (kFeatureDigest); initiators set it
// for no other, and a target ignores it on any other request.
#pragma once

#include <cstdint>
#include <cstring>

namespace tetcp {

constexpr uint32_t kMagic = 0x43544554;  // bytes 'T','E','T','C'
constexpr uint16_t kVersion = 1;
constexpr size_t kHeaderSize = 56;
/** A data body above this is a malformed frame: the connection is closed. */
constexpr uint64_t kMaxBody = 1ull << 30;
/** HELLO / AUTH / NOTIFY bodies above this are malformed frames. */
constexpr uint64_t kMaxControlBody = 64 * 1024;
constexpr size_t kNonceSize = 16;
constexpr size_t kMacSize = 32;

enum Op : uint8_t {
  OP_WRITE = 1,
  OP_READ = 2,
  OP_NOTIFY = 3,
  OP_REVOKE = 4,
  OP_WRITEV = 5,
  OP_WRITE_ROWS = 6,
  OP_HELLO = 16,
  OP_AUTH = 17,
  OP_RESPONSE = 0x80,
};

struct Header {
  uint32_t magic = kMagic;
  uint16_t version = kVersion;
  uint8_t op = 0;
  uint8_t flags = 0;
  int32_t status = 0;
  uint64_t id = 0;
  uint64_t addr = 0;
  uint64_t length = 0;
  uint64_t span_addr = 0;
  uint64_t span_length = 0;
};

inline void put16(uint8_t* p, uint16_t v) { p[0] = uint8_t(v), p[1] = uint8_t(v >> 8); }
inline void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline uint16_t get16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
inline uint32_t get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
inline uint64_t get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

inline void encode(const Header& h, uint8_t out[kHeaderSize]) {
  put32(out, h.magic);
  put16(out + 4, h.version);
  out[6] = h.op;
  out[7] = h.flags;
  put32(out + 8, static_cast<uint32_t>(h.status));
  put32(out + 12, 0);
  put64(out + 16, h.id);
  put64(out + 24, h.addr);
  put64(out + 32, h.length);
  put64(out + 40, h.span_addr);
  put64(out + 48, h.span_length);
}

inline Header decode(const uint8_t in[kHeaderSize]) {
  Header h;
  h.magic = get32(in);
  h.version = get16(in + 4);
  h.op = in[6];
  h.flags = in[7];
  h.status = static_cast<int32_t>(get32(in + 8));
  h.id = get64(in + 16);
  h.addr = get64(in + 24);
  h.length = get64(in + 32);
  h.span_addr = get64(in + 40);
  h.span_length = get64(in + 48);
  return h;
}

// The longest initiator name a target accepts in HELLO. The name is the sender of every
// notification the connection delivers and is copied into each queued one, so it is bounded
// here (a HELLO with a longer name is answered INVALID_ARGUMENT and the connection closed)
// and charged to the notification byte budget. A segment name is host:port (at most a
// 253-byte DNS name, or a bracketed IPv6 address with a zone, plus ":65535"): 1 KiB leaves
// room for any of them.
constexpr size_t kMaxPeerName = 1024;

// HELLO body: u64 client epoch | nonce[16] | u16 name length | name bytes (at most kMaxPeerName)
// HELLO_ACK body: nonce[16] | u8 auth required | u8 features (kFeature*; absent from
//   targets of earlier builds, which initiators read as 0: trailing bytes are ignored)
// REVOKE body: the revoked connection's HELLO nonce[16]; REVOKE_ACK has no body
// AUTH body: mac[32] = HMAC(secret, "te-tcp/1 client" | client nonce | server nonce | target epoch | name)
//   (name: the HELLO's name bytes; the target hands it to listeners as a notification's sender)
// AUTH_ACK body (OK only): mac[32] = HMAC(secret, "te-tcp/1 server" | server nonce | client nonce)
/** HELLO_ACK feature bit: this target answers REVOKE. */
constexpr uint8_t kFeatureRevoke = 1;
/** HELLO_ACK feature bit: this target takes WRITEV frames. */
constexpr uint8_t kFeatureWriteV = 2;
/** HELLO_ACK feature bit: this target takes WRITE_ROWS frames. */
constexpr uint8_t kFeatureRows = 4;
/** HELLO_ACK feature bit: this target answers verified writes with the digest of what landed. */
constexpr uint8_t kFeatureDigest = 8;
/** Header flag of a verified write and of its answer (see above). */
constexpr uint8_t kFlagDigest = 1;
/** Bytes of a WRITE_ROWS frame's row table (u64 width | u64 pitch). */
constexpr size_t kRowTable = 16;
/** Segments in one WRITEV frame at most (its table: 2 KiB; its failure answer: 256 bytes). */
constexpr uint32_t kMaxSegments = 64;
/** Bytes of one WRITEV table entry. */
constexpr size_t kSegmentEntry = 32;

/** One WRITEV segment: a WRITE's target range and the whole request it belongs to. */
struct Segment {
  uint64_t addr = 0;
  uint64_t length = 0;
  uint64_t span_addr = 0;
  uint64_t span_length = 0;
};

inline void encode_segment(const Segment& s, uint8_t out[kSegmentEntry]) {
  put64(out, s.addr);
  put64(out + 8, s.length);
  put64(out + 16, s.span_addr);
  put64(out + 24, s.span_length);
}

inline Segment decode_segment(const uint8_t in[kSegmentEntry]) {
  return Segment{get64(in), get64(in + 8), get64(in + 16), get64(in + 24)};
}
constexpr const char* kClientLabel = "te-tcp/1 client";
constexpr const char* kServerLabel = "te-tcp/1 server";

/** A HELLO body, pointing into the bytes it was parsed from. */
struct HelloBody {
  uint64_t initiator_epoch = 0;
  const uint8_t* nonce = nullptr;  // kNonceSize bytes
  const uint8_t* name = nullptr;
  size_t name_len = 0;
};

/**
 * Parses a HELLO body of `len` bytes (hostile input: any bytes, any length). False when it
 * is malformed: shorter than its fixed part, or a name running past the end. Trailing
 * bytes after the name are ignored (room for later fields).
 */
inline bool parse_hello(const uint8_t* body, size_t len, HelloBody* out) {
  constexpr size_t kFixed = 8 + kNonceSize + 2;
  if (body == nullptr || len < kFixed) return false;
  const size_t name_len = get16(body + 8 + kNonceSize);
  if (name_len > len - kFixed) return false;
  out->initiator_epoch = get64(body);
  out->nonce = body + 8;
  out->name = body + kFixed;
  out->name_len = name_len;
  return true;
}

}  // namespace tetcp
