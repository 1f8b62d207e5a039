// Closing an initiator while a peer it was told to close is still being revoked: the target
// is inside a copy into this process, so the revocation cannot finish before close() does.
// close() waits for the copy (bounded), fails the peer and must not touch it afterwards. The
// target here is raw: a socket of the test's own that answers HELLO and marks a copy thread
// busy on the connection's control page, as a target stopped inside a copy would.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "control_page.h"
#include "socket.h"
#include "transport.h"
#include "wire.h"

using namespace teshm;

namespace {

/** Accepts one connection on `listen_fd` within `ms` (non-blocking), or returns -1. */
int accept_within(int listen_fd, int ms) {
  pollfd p{listen_fd, POLLIN, 0};
  if (poll(&p, 1, ms) != 1) return -1;
  return accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
}

/** Waits up to `ms` for `flag`. */
bool wait_for(const std::atomic<bool>& flag, int ms) {
  for (int i = 0; i < ms && !flag.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return flag.load();
}

}  // namespace

void test_close_while_a_closed_peer_is_revoked() {
  const std::string target_socket = "te-shm-stuck-target/" + std::to_string(getpid());
  int listen_fd = -1;
  std::string err;
  CHECK(listen_abstract(target_socket, 4, &listen_fd, &err) == te::TE_OK);

  std::atomic<bool> opened{false};
  std::atomic<int32_t> open_status{-1};
  std::mutex logs_mu;
  std::vector<std::string> logs;
  Options o;
  o.segment_name = "stuck-initiator";
  o.epoch = 5;
  o.socket_name = "te-shm-stuck-initiator/" + std::to_string(getpid());
  Transport initiator(o, [&](Event e) {
    if (e.kind == Event::OPEN) {
      open_status = e.status;
      opened = true;
    } else if (e.kind == Event::LOG) {
      std::lock_guard<std::mutex> lock(logs_mu);
      logs.push_back(e.text);
    }
  });
  CHECK(initiator.start(&err) == te::TE_OK);
  const uint64_t peer = initiator.open_peer(target_socket, 7, "stuck-target");

  // The raw target: takes HELLO and its control page, marks copy thread 0 busy, answers OK.
  int conn = accept_within(listen_fd, 2000);
  CHECK(conn >= 0);
  if (conn < 0) {
    initiator.close();
    close(listen_fd);
    return;
  }
  std::vector<uint8_t> buf;
  int page_fd = -1;
  bool truncated = false;
  for (int i = 0; i < 2000 && page_fd < 0; ++i) {
    if (recv_message(conn, &buf, &page_fd, &truncated) > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(page_fd >= 0);
  ControlPage* page = nullptr;
  CHECK(page_fd >= 0 && map_control_page(page_fd, &page, &err) == te::TE_OK);
  if (page == nullptr) {
    initiator.close();
    if (page_fd >= 0) close(page_fd);
    close(conn);
    close(listen_fd);
    return;
  }
  page->busy[0].store(1);
  std::vector<uint8_t> msg;
  encode_hello_reply(HelloReply{te::TE_OK, 16, ""}, &msg);
  CHECK(send_message(conn, msg) > 0);
  CHECK(wait_for(opened, 2000) && open_status.load() == te::TE_OK);

  // Closed by its user: revoked, and held (REVOKING) while the copy runs.
  initiator.close_peer(peer);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto t0 = std::chrono::steady_clock::now();
  initiator.close();  // crashed here: the peer was erased while close() walked the peers
  long ms = long(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count());
  std::printf("  close() with a closed peer still inside a copy returned after %ld ms (bound 2000 ms)\n", ms);
  CHECK(ms < 5000);
  {
    std::lock_guard<std::mutex> lock(logs_mu);
    bool said = false;
    for (const std::string& l : logs) said = said || l.find("stopped inside a copy") != std::string::npos;
    CHECK(said);
  }
  CHECK(page->revoked.load() == 1);

  unmap_control_page(page);
  close(page_fd);
  close(conn);
  close(listen_fd);
}
