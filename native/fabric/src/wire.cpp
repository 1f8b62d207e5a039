#include "wire.h"

#include <cstring>

namespace te::fabric::wire {

void put_u16(std::vector<uint8_t>& o, uint16_t v) {
  for (int i = 0; i < 2; ++i) o.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_u32(std::vector<uint8_t>& o, uint32_t v) {
  for (int i = 0; i < 4; ++i) o.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_u64(std::vector<uint8_t>& o, uint64_t v) {
  for (int i = 0; i < 8; ++i) o.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_bytes(std::vector<uint8_t>& o, const void* p, size_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  o.insert(o.end(), b, b + n);
}

uint16_t Reader::u16() {
  if (off + 2 > n) return ok = false, 0;
  uint16_t v = static_cast<uint16_t>(p[off] | (p[off + 1] << 8));
  off += 2;
  return v;
}
uint32_t Reader::u32() {
  if (off + 4 > n) return ok = false, 0;
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[off + i]) << (8 * i);
  off += 4;
  return v;
}
uint64_t Reader::u64() {
  if (off + 8 > n) return ok = false, 0;
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[off + i]) << (8 * i);
  off += 8;
  return v;
}
std::string Reader::str(size_t len) {
  const uint8_t* b = bytes(len);
  return b ? std::string(reinterpret_cast<const char*>(b), len) : std::string();
}
const uint8_t* Reader::bytes(size_t len) {
  if (len > n || off > n - len) return ok = false, nullptr;
  const uint8_t* b = p + off;
  off += len;
  return b;
}

void put_header(std::vector<uint8_t>& out, const Header& h) {
  put_u32(out, kMagic);
  put_u16(out, kVersion);
  out.push_back(h.type);
  out.push_back(h.flags);
  put_u16(out, h.rail);
  put_u16(out, static_cast<uint16_t>(h.sender_addr.size()));
  put_u32(out, static_cast<uint32_t>(h.status));
  put_u64(out, h.req_id);
  put_u64(out, h.sender_epoch);
  put_u64(out, h.target_epoch);
  put_u64(out, h.arg);
  put_bytes(out, h.sender_addr.data(), h.sender_addr.size());
}

bool get_header(const uint8_t* data, size_t len, Header* h, size_t* body) {
  Reader r{data, len, 0};
  if (r.u32() != kMagic || r.u16() != kVersion) return false;
  const uint8_t* tf = r.bytes(2);
  if (!tf) return false;
  h->type = tf[0];
  h->flags = tf[1];
  h->rail = r.u16();
  uint16_t alen = r.u16();
  h->status = static_cast<int32_t>(r.u32());
  h->req_id = r.u64();
  h->sender_epoch = r.u64();
  h->target_epoch = r.u64();
  h->arg = r.u64();
  const uint8_t* a = r.bytes(alen);
  if (!r.ok || !a) return false;
  h->sender_addr.assign(a, a + alen);
  *body = r.off;
  return true;
}

bool get_table(Reader& r, std::vector<TableEntry>* out) {
  uint16_t nkeys = r.u16();
  uint32_t count = r.u32();
  // Every region carries one key per rail of its owner, which has at least one rail: a
  // table without keys would leave nothing to address its regions with.
  if (!r.ok || nkeys == 0) return false;
  // A count the message cannot hold is malformed (and must not size an allocation).
  uint64_t per = 24 + 8ull * nkeys;
  if (count > (r.n - r.off) / per) return false;
  out->reserve(out->size() + count);
  for (uint32_t k = 0; k < count; ++k) {
    TableEntry e;
    e.addr = r.u64();
    e.length = r.u64();
    e.base = r.u64();
    e.keys.reserve(nkeys);
    for (uint16_t j = 0; j < nkeys; ++j) e.keys.push_back(r.u64());
    if (!r.ok) return false;
    out->push_back(std::move(e));
  }
  return true;
}

bool get_notify(Reader& r, std::string* from, const uint8_t** payload, uint32_t* payload_len) {
  uint16_t nl = r.u16();
  *from = r.str(nl);
  *payload_len = r.u32();
  if (!r.ok || *payload_len > kMaxPayload) return false;
  *payload = r.bytes(*payload_len);
  return r.ok && *payload != nullptr;
}

}  // namespace te::fabric::wire
