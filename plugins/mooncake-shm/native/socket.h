// Unix-socket helpers of mooncake-shm: abstract SOCK_SEQPACKET sockets, datagrams with an
// optional file descriptor attached, and the kernel's view of who is on the other end.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "te/clock.h"
#include "te/status.h"

namespace teshm {

/** Binds and listens on the abstract name `name` (no leading NUL). */
te::Status listen_abstract(const std::string& name, int backlog, int* fd, std::string* err);
/** Connects to the abstract name, waiting at most `timeout_ms`. PEER_UNREACHABLE when nothing listens. */
te::Status connect_abstract(const std::string& name, int timeout_ms, int* fd, std::string* err);

struct PeerCred {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};
/** SO_PEERCRED: the credentials the peer had when it connected, as the kernel recorded them. */
bool peer_cred(int fd, PeerCred* out);

/** Sends one datagram, with `pass_fd` attached when >= 0. Returns bytes sent or -1 (errno). */
ssize_t send_message(int fd, const std::vector<uint8_t>& msg, int pass_fd = -1);
/**
 * Receives one datagram into `buf` (resized to what arrived). An attached descriptor lands
 * in *got_fd (else -1); descriptors the receiver did not ask for are closed. Returns bytes
 * received, 0 at end of stream, -1 on error (errno; EAGAIN when nothing is waiting).
 * A datagram longer than the buffer is reported as truncated via *truncated.
 */
ssize_t recv_message(int fd, std::vector<uint8_t>* buf, int* got_fd, bool* truncated);

/** pidfd_open(2): a descriptor that becomes readable when the process exits; -1 where unsupported. */
int open_pidfd(pid_t pid);
/** Whether a pidfd reports its process exited. */
bool pidfd_exited(int pidfd);

using te::now_ms;

}  // namespace teshm
