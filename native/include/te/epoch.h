// The process epoch: a random 64-bit value drawn once per process start. Peers compare it
// with the epoch in a cached descriptor, so a restarted process at the same address is
// recognised and never written to with stale addresses.
#pragma once

#include <cstdint>

namespace te {

/** This process's epoch (non-zero, stable for the life of the process). */
uint64_t process_epoch();

/** Fills `out` with `n` bytes from the kernel's random source (getrandom, /dev/urandom fallback). */
bool random_bytes(void* out, unsigned long n);

}  // namespace te
