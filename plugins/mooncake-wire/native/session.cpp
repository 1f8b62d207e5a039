#include "session.h"

#include "wire.h"

namespace mcwire {

namespace {

SessionEnd end_of(Io io) {
  switch (io) {
    case Io::TIMEOUT:
      return SessionEnd::TIMEOUT;
    case Io::STOPPED:
      return SessionEnd::STOPPED;
    default:
      return SessionEnd::TRUNCATED;
  }
}

Io send_status(Stream& s, uint64_t status) {
  uint8_t b[kStatusBytes];
  encode_status(status, b);
  return s.write_all(b, sizeof b);
}

}  // namespace

SessionEnd serve_session(Stream& s, const te::MemoryRegistry& registry, TargetCounters& counters) {
  for (;;) {
    uint8_t raw[kHeaderBytes];
    Io io = s.read_exact(raw, sizeof raw, true);
    if (io == Io::CLOSED) return SessionEnd::PEER_CLOSED;
    if (io != Io::OK) {
      if (io == Io::LOST) counters.truncated++;
      if (io == Io::TIMEOUT) counters.timeouts++;
      return io == Io::LOST ? SessionEnd::TRUNCATED : end_of(io);
    }
    Header h = decode_header(raw);
    (h.v2 ? counters.v2_requests : counters.v1_requests)++;
    te::Lease lease;
    // An empty request is refused too (the reference target does the same).
    if (h.size == 0 || registry.acquire(h.addr, h.size, true, lease) != te::TE_OK) {
      counters.rejected++;
      // v2 expects the rejection frame; v1 has no way to say no but closing.
      if (h.v2) send_status(s, kStatusAddrRejected);
      return SessionEnd::REJECTED;
    }
    auto* mem = reinterpret_cast<uint8_t*>(h.addr);
    if (h.write) {
      io = s.read_exact(mem, h.size, false);
      lease.release();
      if (io != Io::OK) {
        if (io == Io::TIMEOUT)
          counters.timeouts++;
        else
          counters.truncated++;
        return end_of(io);
      }
      counters.writes++;
      counters.bytes_written += h.size;
      // Acknowledged only once the last byte is in memory.
      if (h.v2 && send_status(s, kStatusOk) != Io::OK) return SessionEnd::REPLY_FAILED;
    } else {
      if (h.v2 && send_status(s, kStatusOk) != Io::OK) return SessionEnd::REPLY_FAILED;
      io = s.write_all(mem, h.size);
      lease.release();
      if (io != Io::OK) return io == Io::STOPPED ? SessionEnd::STOPPED : SessionEnd::REPLY_FAILED;
      counters.reads++;
      counters.bytes_read += h.size;
    }
  }
}

const char* session_end_name(SessionEnd e) {
  switch (e) {
    case SessionEnd::PEER_CLOSED:
      return "peer closed";
    case SessionEnd::REJECTED:
      return "request outside registered memory rejected";
    case SessionEnd::TRUNCATED:
      return "truncated request";
    case SessionEnd::TIMEOUT:
      return "timed out";
    case SessionEnd::STOPPED:
      return "stopped";
    case SessionEnd::REPLY_FAILED:
      return "reply failed";
  }
  return "?";
}

}  // namespace mcwire
