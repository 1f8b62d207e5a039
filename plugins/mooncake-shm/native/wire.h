// mooncake-shm wire protocol: datagrams on a SOCK_SEQPACKET unix socket between two
// processes of one host. The kernel keeps message boundaries, so a message is parsed as one
// buffer; every field is fixed width in host byte order (both ends run on this machine).
// parse_message() is the only code that reads bytes a peer sent, and it is pure (no I/O,
// no allocation beyond the output vectors), so a fuzzer can drive it directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "te/status.h"

namespace teshm {

constexpr uint32_t kMagic = 0x48534554;  // "TESH"
constexpr uint16_t kVersion = 2;         // 2: pool memory (POOL, POOL_GONE, Request::pool)
constexpr size_t kHeaderSize = 8;        // magic u32, version u16, type u16
constexpr size_t kMaxMessage = 65536;
constexpr size_t kMaxName = 256;
constexpr size_t kMaxNotify = 65536 - 64;
constexpr size_t kRequestSize =
    48;  // seq u64, batch u64, op u8 + 3 pad, pool u32, initiator addr u64, target addr u64, len u64
constexpr size_t kCompletionSize = 16;  // seq u64, status i32, pad u32
constexpr size_t kMaxRequestsPerMessage = (kMaxMessage - kHeaderSize - 4) / kRequestSize;
constexpr size_t kMaxCompletionsPerMessage = (kMaxMessage - kHeaderSize - 4) / kCompletionSize;

enum Type : uint16_t {
  HELLO = 1,        // initiator -> target, carries the control page memfd (SCM_RIGHTS)
  HELLO_REPLY = 2,  // target -> initiator
  REQUESTS = 3,     // initiator -> target: copies to run
  CANCEL = 4,       // initiator -> target: drop what is left of a batch
  COMPLETIONS = 5,  // target -> initiator: terminal statuses
  NOTIFY = 6,       // initiator -> target: a notification, after its batch's data landed
  POOL = 7,         // initiator -> target: one of its pool allocations, its sealed memfd attached (SCM_RIGHTS)
  POOL_GONE = 8,    // initiator -> target: that pool was freed; drop the mapping
};

enum Op : uint8_t { OP_READ = 0, OP_WRITE = 1 };

struct Hello {
  uint64_t expected_epoch = 0;  // the target's epoch from its descriptor
  uint64_t probe_addr = 0;      // initiator memory holding `nonce`: the target reads it to prove it may
  uint8_t nonce[16] = {};
  std::string name;  // the initiator's segment name (the `from` of its notifications)
};

struct HelloReply {
  int32_t status = 0;
  uint32_t max_outstanding = 0;  // requests the target accepts in flight from this connection
  std::string message;
};

/**
 * Pool memory the initiator allocated (see pools.h): the target maps the attached memfd and
 * copies a request that names the pool with memcpy instead of process_vm_*.
 */
struct PoolAd {
  uint32_t id = 0;    // never 0, never reused by one process
  uint64_t base = 0;  // where the pool starts in the initiator's address space
  uint64_t len = 0;
};

/** One copy: `len` bytes between initiator memory and target memory (op seen from the initiator). */
struct Request {
  uint64_t seq = 0;
  uint64_t batch = 0;
  uint8_t op = OP_WRITE;
  uint64_t initiator_addr = 0;
  uint64_t target_addr = 0;
  uint64_t len = 0;
  uint32_t pool = 0;  // an announced pool holding the initiator range; 0: ordinary memory (on the wire after op)
};

struct Completion {
  uint64_t seq = 0;
  int32_t status = 0;
};

struct Message {
  Type type = HELLO;
  Hello hello;
  HelloReply reply;
  std::vector<Request> requests;
  uint64_t cancel_batch = 0;
  std::vector<Completion> completions;
  uint64_t notify_seq = 0;
  std::vector<uint8_t> notify;
  PoolAd pool;  // POOL; POOL_GONE carries only the id
};

/**
 * Parses one datagram. TE_BAD_FRAME (with `why`) for anything malformed: wrong magic,
 * version, type, length, counts, a zero-length request, an unknown op, oversized name or
 * payload, a pool of id 0, of no bytes or past the end of the address space. Never reads
 * past `len`.
 */
te::Status parse_message(const uint8_t* data, size_t len, Message* out, std::string* why);

// Encoders append one whole datagram to `out` (cleared first).
void encode_hello(const Hello& h, std::vector<uint8_t>* out);
void encode_hello_reply(const HelloReply& r, std::vector<uint8_t>* out);
void encode_requests(const Request* r, size_t n, std::vector<uint8_t>* out);
void encode_cancel(uint64_t batch, std::vector<uint8_t>* out);
void encode_completions(const Completion* c, size_t n, std::vector<uint8_t>* out);
void encode_notify(uint64_t seq, const uint8_t* payload, size_t len, std::vector<uint8_t>* out);
void encode_pool(const PoolAd& p, std::vector<uint8_t>* out);
void encode_pool_gone(uint32_t id, std::vector<uint8_t>* out);

}  // namespace teshm
