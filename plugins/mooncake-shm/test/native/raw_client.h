// A raw mooncake-shm client for the C++ tests: datagrams written by hand on the target's real
// socket, so a test can send what an honest initiator never would.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "control_page.h"
#include "socket.h"
#include "wire.h"

namespace teshm {

/** Waits up to `ms` for one datagram (0: end of stream, -2: nothing came). */
inline ssize_t recv_wait(int fd, std::vector<uint8_t>* buf, int ms = 2000) {
  for (int i = 0; i < ms; ++i) {
    int got = -1;
    bool trunc = false;
    ssize_t r = recv_message(fd, buf, &got, &trunc);
    if (got >= 0) close(got);
    if (r >= 0) return r;
    if (errno != EAGAIN) return -1;
    usleep(1000);
  }
  return -2;
}

/** A connection past HELLO (its control page mapped), or fd -1 when the target refused it. */
struct RawClient {
  int fd = -1;
  int ctl = -1;
  ControlPage* page = nullptr;
  uint8_t nonce[16] = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6};

  RawClient(const std::string& socket, uint64_t epoch) {
    std::string err, why;
    std::vector<uint8_t> msg, buf;
    if (connect_abstract(socket, 1000, &fd, &err) != te::TE_OK || create_control_page(&ctl, &page, &err) != te::TE_OK) {
      drop();
      return;
    }
    Hello h;
    h.expected_epoch = epoch;
    h.probe_addr = reinterpret_cast<uint64_t>(nonce);
    std::memcpy(h.nonce, nonce, sizeof nonce);
    h.name = "raw-client";
    encode_hello(h, &msg);
    Message m;
    if (send_message(fd, msg, ctl) < 0 || recv_wait(fd, &buf) <= 0 ||
        parse_message(buf.data(), buf.size(), &m, &why) != te::TE_OK || m.reply.status != te::TE_OK)
      drop();
  }
  ~RawClient() {
    drop();
    unmap_control_page(page);
    if (ctl >= 0) close(ctl);
  }
  void drop() {
    if (fd >= 0) close(fd);
    fd = -1;
  }

  /** Sends one request and returns its completion's status (or 1 when none came). */
  int32_t request(const Request& r) {
    std::vector<uint8_t> msg, buf;
    encode_requests(&r, 1, &msg);
    if (send_message(fd, msg) < 0) return 1;
    Message m;
    std::string why;
    while (recv_wait(fd, &buf) > 0 && parse_message(buf.data(), buf.size(), &m, &why) == te::TE_OK)
      for (const Completion& c : m.completions)
        if (c.seq == r.seq) return c.status;
    return 1;
  }
};

}  // namespace teshm
