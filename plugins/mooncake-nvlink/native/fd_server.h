// Serves the POSIX file descriptors of exported allocations to peers on the same machine:
// an abstract unix socket ("te-nvlink-<pid>-<random>", named in the transport's endpoint),
// one request per connection, the fd passed with SCM_RIGHTS. Process-wide, started by the
// first posix-fd transport and stopped with the last.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>

#include <cstdint>
#include <string>

#include "te/cuda/errors.h"

namespace tenvl {

/** Starts (or counts another user of) the server; returns its socket name. */
te::cuda::Error fd_server_acquire(std::string* name);
void fd_server_release();
/** The running server's socket name, '' when none runs. */
std::string fd_server_name();
/** The abstract unix socket address of the server named `name`, and its length. */
socklen_t fd_socket_address(const std::string& name, sockaddr_un* a);

/**
 * Fetches the fd of allocation `id` from the server named `name` (deadline `timeout_ms`).
 * The caller owns the returned fd.
 */
te::cuda::Error fetch_fd(const std::string& name, uint64_t id, int timeout_ms, int* fd_out, uint64_t* size_out);

}  // namespace tenvl
