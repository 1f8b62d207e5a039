// Running out of file descriptors, as every listener of the native layers meets it. A
// connection that cannot be accepted for want of a descriptor stays in the listen backlog
// and keeps the listening socket readable, so a loop that accepts again at once (or polls a
// provider that does) spins a CPU until descriptors are freed. Listeners recognise the
// condition with these and wait kDescriptorRetryMs between tries instead.
#pragma once

#include <errno.h>
#include <sys/eventfd.h>
#include <unistd.h>

namespace te {

/** How long a listener waits before trying again to accept while out of descriptors. */
constexpr int kDescriptorRetryMs = 100;

/** Whether an accept failed for want of a descriptor or of kernel memory (it may succeed later). */
inline bool accept_starved(int err) { return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM; }

/**
 * Whether this process can open no further descriptor now, for code that does not see the
 * failed accept itself (a libfabric provider accepts inside its progress). Costs two system
 * calls.
 */
inline bool descriptors_exhausted() {
  const int fd = eventfd(0, EFD_CLOEXEC);
  if (fd >= 0) {
    ::close(fd);
    return false;
  }
  return errno == EMFILE || errno == ENFILE;
}

}  // namespace te
