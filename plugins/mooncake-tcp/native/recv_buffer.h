// The buffered receive both ends of a connection share: headers, small bodies and control
// messages land in a per-connection buffer and are parsed from there (large bodies bypass
// it and are received straight into registered memory).
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace tetcp {

// Receives into the free tail of buf[pos, end), first resetting an empty buffer or moving
// unparsed bytes to the front of a full one. Returns what recv returned; on success `end`
// has grown by that much.
inline ssize_t recv_buffered(int fd, std::vector<uint8_t>& buf, size_t& pos, size_t& end) {
  if (pos == end) pos = end = 0;
  if (end == buf.size()) {
    std::memmove(buf.data(), buf.data() + pos, end - pos);
    end -= pos;
    pos = 0;
  }
  ssize_t r = ::recv(fd, buf.data() + end, buf.size() - end, 0);
  if (r > 0) end += static_cast<size_t>(r);
  return r;
}

}  // namespace tetcp
