// The copies themselves: process_vm_readv/writev between this process (the target, which
// owns the registered range) and an initiator, plus the huge-page hint for registered memory.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "te/status.h"

namespace teshm {

/**
 * Copies `len` bytes: WRITE pulls initiator memory into `local` (process_vm_readv), READ
 * pushes `local` into initiator memory (process_vm_writev). Returns OK, or a status with
 * `why` naming the errno: ESRCH (the initiator exited) PEER_FAILED, EFAULT (its range is not
 * mapped) ADDRESS_OUT_OF_RANGE, EPERM (ptrace not permitted) AUTH_FAILED, a short copy
 * TRANSFER_FAILED.
 */
te::Status copy_with_peer(pid_t pid, uint8_t op, uint64_t local, uint64_t remote, uint64_t len, std::string* why);

/** The same copy when the initiator range is mapped here (pool memory, see pools.h): memcpy. */
void copy_mapped(uint8_t op, uint64_t local, uint8_t* initiator, uint64_t len);

/** Reads `len` bytes of a peer's memory (the HELLO probe). */
te::Status read_peer(pid_t pid, uint64_t remote, void* out, size_t len, std::string* why);

/**
 * Asks the kernel to back [addr, addr+len) with transparent huge pages where whole 2 MiB
 * pages fit (MADV_HUGEPAGE, then MADV_COLLAPSE for what is already faulted in): the
 * kernel pins and maps pages one by one in process_vm_*, so fewer, larger pages make the
 * copies faster. Best effort: returns what was applied, for describe().
 */
std::string prefer_huge_pages(uint64_t addr, uint64_t len);

}  // namespace teshm
