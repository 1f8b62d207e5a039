// The data listener: accepts initiators' connections and hands them to the transport,
// shedding them while the process is out of file descriptors.
#pragma once

#include "loop.h"

namespace tetcp {

class Transport;

/**
 * The descriptor the listener keeps in reserve for shedding, or -1 with errno set. Opened
 * by the starting thread, before the transport reports itself started: a process that then
 * uses up its descriptors must not leave the listener without one.
 */
int open_descriptor_reserve();

/**
 * Loop thread: starts accepting on the listening socket `fd` (non-blocking) on `loop`; each
 * accepted connection goes to Transport::accept_fd. The handler owns `fd` and `reserve`
 * (from open_descriptor_reserve) and closes both on shutdown.
 */
IoHandler* start_listener(Transport* t, Loop* loop, int fd, int reserve);

}  // namespace tetcp
