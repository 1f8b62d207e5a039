// The target side of one Mooncake data connection: read a 24-byte header, check the range
// against this process's registered memory, apply or serve it, answer as the framing asks,
// repeat until the peer closes. Nothing is read into or out of memory before the whole range
// was found inside one remote-accessible region, and the region stays leased (unregister
// waits) while its bytes move.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "stream.h"
#include "te/memory_registry.h"

namespace mcwire {

/** What targets served, for tests and `describe()`. */
struct TargetCounters {
  std::atomic<uint64_t> writes{0}, reads{0}, bytes_written{0}, bytes_read{0};
  std::atomic<uint64_t> v2_requests{0}, v1_requests{0};
  std::atomic<uint64_t> rejected{0}, truncated{0}, connections{0}, refused_connections{0}, timeouts{0};
  std::atomic<uint64_t> waited_connections{0};  // accepted over a bound; served once a place freed
};

enum class SessionEnd { PEER_CLOSED, REJECTED, TRUNCATED, TIMEOUT, STOPPED, REPLY_FAILED };

SessionEnd serve_session(Stream& s, const te::MemoryRegistry& registry, TargetCounters& counters);

const char* session_end_name(SessionEnd e);

}  // namespace mcwire
