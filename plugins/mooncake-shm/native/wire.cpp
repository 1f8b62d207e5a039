// Encoding and parsing of mooncake-shm datagrams (see wire.h).
#include "wire.h"

#include <cstring>

namespace teshm {
namespace {

class Writer {
 public:
  // `body` is the message's size past its header when known: reserved at once, a message is
  // encoded without growing its buffer field by field (a vector kept by the caller keeps it).
  explicit Writer(std::vector<uint8_t>* out, Type t, size_t body = 0) : out_(out) {
    out_->clear();
    out_->reserve(kHeaderSize + body);
    u32(kMagic);
    u16(kVersion);
    u16(t);
  }
  template <typename T>
  void put(T v) {
    size_t at = out_->size();
    out_->resize(at + sizeof v);
    std::memcpy(out_->data() + at, &v, sizeof v);
  }
  void u8(uint8_t v) { put(v); }
  void u16(uint16_t v) { put(v); }
  void u32(uint32_t v) { put(v); }
  void u64(uint64_t v) { put(v); }
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out_->insert(out_->end(), b, b + n);
  }

 private:
  std::vector<uint8_t>* out_;
};

// Reads fixed-width fields; every read checks the remaining length first.
class Reader {
 public:
  Reader(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  template <typename T>
  bool get(T* v) {
    if (n_ - at_ < sizeof(T)) return false;
    std::memcpy(v, d_ + at_, sizeof(T));
    at_ += sizeof(T);
    return true;
  }
  bool bytes(void* out, size_t n) {
    if (n_ - at_ < n) return false;
    std::memcpy(out, d_ + at_, n);
    at_ += n;
    return true;
  }
  bool skip(size_t n) {
    if (n_ - at_ < n) return false;
    at_ += n;
    return true;
  }
  size_t left() const { return n_ - at_; }

 private:
  const uint8_t* d_;
  size_t n_;
  size_t at_ = 0;
};

te::Status bad(std::string* why, const char* what) {
  if (why) *why = what;
  return te::TE_BAD_FRAME;
}

te::Status parse_requests(Reader& r, std::vector<Request>* out, std::string* why) {
  uint32_t n = 0;
  if (!r.get(&n)) return bad(why, "truncated REQUESTS");
  if (n == 0 || n > kMaxRequestsPerMessage) return bad(why, "REQUESTS count out of bounds");
  if (r.left() != static_cast<size_t>(n) * kRequestSize) return bad(why, "REQUESTS length does not match its count");
  out->resize(n);
  for (Request& q : *out) {
    r.get(&q.seq);
    r.get(&q.batch);
    r.get(&q.op);
    r.skip(3);
    r.get(&q.pool);
    r.get(&q.initiator_addr);
    r.get(&q.target_addr);
    r.get(&q.len);
    if (q.op != OP_READ && q.op != OP_WRITE) return bad(why, "unknown request op");
    if (q.len == 0) return bad(why, "zero-length request");
  }
  return te::TE_OK;
}

// POOL: id, pad, base, length; POOL_GONE: id, pad.
te::Status parse_pool(Reader& r, bool announce, PoolAd* p, std::string* why) {
  uint32_t pad = 0;
  if (!r.get(&p->id) || !r.get(&pad)) return bad(why, "truncated POOL");
  if (announce && (!r.get(&p->base) || !r.get(&p->len))) return bad(why, "truncated POOL");
  if (r.left() != 0) return bad(why, "POOL has the wrong length");
  if (p->id == 0) return bad(why, "POOL with id 0");
  if (announce && (p->len == 0 || p->base + p->len < p->base)) return bad(why, "POOL range is empty or wraps");
  return te::TE_OK;
}

}  // namespace

te::Status parse_message(const uint8_t* data, size_t len, Message* out, std::string* why) {
  if (data == nullptr || len < kHeaderSize) return bad(why, "message shorter than its header");
  if (len > kMaxMessage) return bad(why, "message longer than 64 KiB");
  Reader r(data, len);
  uint32_t magic = 0;
  uint16_t version = 0, type = 0;
  r.get(&magic);
  r.get(&version);
  r.get(&type);
  if (magic != kMagic) return bad(why, "bad magic");
  if (version != kVersion) return bad(why, "unsupported protocol version");
  out->type = static_cast<Type>(type);
  switch (type) {
    case HELLO: {
      uint16_t name_len = 0;
      if (!r.get(&out->hello.expected_epoch) || !r.get(&out->hello.probe_addr) || !r.bytes(out->hello.nonce, 16) ||
          !r.get(&name_len))
        return bad(why, "truncated HELLO");
      if (name_len > kMaxName) return bad(why, "HELLO name longer than 256 bytes");
      if (r.left() != name_len) return bad(why, "HELLO length does not match its name");
      out->hello.name.assign(reinterpret_cast<const char*>(data) + (len - name_len), name_len);
      return te::TE_OK;
    }
    case HELLO_REPLY: {
      uint16_t msg_len = 0;
      if (!r.get(&out->reply.status) || !r.get(&out->reply.max_outstanding) || !r.get(&msg_len))
        return bad(why, "truncated HELLO_REPLY");
      if (r.left() != msg_len) return bad(why, "HELLO_REPLY length does not match its message");
      out->reply.message.assign(reinterpret_cast<const char*>(data) + (len - msg_len), msg_len);
      return te::TE_OK;
    }
    case REQUESTS:
      return parse_requests(r, &out->requests, why);
    case CANCEL:
      if (!r.get(&out->cancel_batch) || r.left() != 0) return bad(why, "CANCEL has the wrong length");
      return te::TE_OK;
    case COMPLETIONS: {
      uint32_t n = 0;
      if (!r.get(&n)) return bad(why, "truncated COMPLETIONS");
      if (n == 0 || n > kMaxCompletionsPerMessage) return bad(why, "COMPLETIONS count out of bounds");
      if (r.left() != static_cast<size_t>(n) * kCompletionSize)
        return bad(why, "COMPLETIONS length does not match its count");
      out->completions.resize(n);
      for (Completion& c : out->completions) {
        r.get(&c.seq);
        r.get(&c.status);
        r.skip(4);
      }
      return te::TE_OK;
    }
    case NOTIFY: {
      uint32_t n = 0;
      if (!r.get(&out->notify_seq) || !r.get(&n)) return bad(why, "truncated NOTIFY");
      if (n > kMaxNotify || r.left() != n) return bad(why, "NOTIFY length does not match its payload");
      out->notify.assign(data + (len - n), data + len);
      return te::TE_OK;
    }
    case POOL:
    case POOL_GONE:
      return parse_pool(r, type == POOL, &out->pool, why);
    default:
      return bad(why, "unknown message type");
  }
}

void encode_hello(const Hello& h, std::vector<uint8_t>* out) {
  Writer w(out, HELLO);
  w.u64(h.expected_epoch);
  w.u64(h.probe_addr);
  w.bytes(h.nonce, 16);
  size_t n = h.name.size() > kMaxName ? kMaxName : h.name.size();
  w.u16(static_cast<uint16_t>(n));
  w.bytes(h.name.data(), n);
}

void encode_hello_reply(const HelloReply& r, std::vector<uint8_t>* out) {
  Writer w(out, HELLO_REPLY);
  w.put(r.status);
  w.u32(r.max_outstanding);
  size_t n = r.message.size() > 1024 ? 1024 : r.message.size();
  w.u16(static_cast<uint16_t>(n));
  w.bytes(r.message.data(), n);
}

void encode_requests(const Request* q, size_t n, std::vector<uint8_t>* out) {
  Writer w(out, REQUESTS, 4 + n * kRequestSize);
  w.u32(static_cast<uint32_t>(n));
  static const uint8_t pad[3] = {};
  for (size_t i = 0; i < n; ++i) {
    w.u64(q[i].seq);
    w.u64(q[i].batch);
    w.u8(q[i].op);
    w.bytes(pad, 3);
    w.u32(q[i].pool);
    w.u64(q[i].initiator_addr);
    w.u64(q[i].target_addr);
    w.u64(q[i].len);
  }
}

void encode_cancel(uint64_t batch, std::vector<uint8_t>* out) {
  Writer w(out, CANCEL);
  w.u64(batch);
}

void encode_completions(const Completion* c, size_t n, std::vector<uint8_t>* out) {
  Writer w(out, COMPLETIONS, 4 + n * kCompletionSize);
  w.u32(static_cast<uint32_t>(n));
  for (size_t i = 0; i < n; ++i) {
    w.u64(c[i].seq);
    w.put(c[i].status);
    w.u32(0);
  }
}

void encode_notify(uint64_t seq, const uint8_t* payload, size_t len, std::vector<uint8_t>* out) {
  Writer w(out, NOTIFY, 12 + len);
  w.u64(seq);
  w.u32(static_cast<uint32_t>(len));
  w.bytes(payload, len);
}

void encode_pool(const PoolAd& p, std::vector<uint8_t>* out) {
  Writer w(out, POOL);
  w.u32(p.id);
  w.u32(0);
  w.u64(p.base);
  w.u64(p.len);
}

void encode_pool_gone(uint32_t id, std::vector<uint8_t>* out) {
  Writer w(out, POOL_GONE);
  w.u32(id);
  w.u32(0);
}

}  // namespace teshm
