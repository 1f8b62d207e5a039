// The data listener: accepts initiators' connections and hands them to the transport,
// shedding them while the process is out of file descriptors.
#pragma once

#include "loop.h"

namespace tetcp {

class Transport;

/**
 * Loop thread: starts accepting on the listening socket `fd` (non-blocking) on `loop`; each
 * accepted connection goes to Transport::accept_fd. The handler closes `fd` on shutdown.
 */
IoHandler* start_listener(Transport* t, Loop* loop, int fd);

}  // namespace tetcp
