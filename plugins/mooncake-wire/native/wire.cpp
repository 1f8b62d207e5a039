#include "wire.h"

#include <cstring>

namespace mcwire {

void put_le64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint64_t get_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void encode_header(const Header& h, uint8_t out[kHeaderBytes]) {
  std::memset(out, 0, kHeaderBytes);
  put_le64(out, h.size);
  put_le64(out + 8, h.addr);
  out[16] = static_cast<uint8_t>((h.write ? kOpWrite : kOpRead) | (h.v2 ? kV2Flag : 0));
}

Header decode_header(const uint8_t in[kHeaderBytes]) {
  Header h;
  h.size = get_le64(in);
  h.addr = get_le64(in + 8);
  h.v2 = (in[16] & kV2Flag) != 0;
  h.write = (in[16] & 0x7F) == kOpWrite;
  return h;
}

void encode_status(uint64_t status, uint8_t out[kStatusBytes]) { put_le64(out, status); }
uint64_t decode_status(const uint8_t in[kStatusBytes]) { return get_le64(in); }

}  // namespace mcwire
