// te native status codes. This list must match NATIVE_STATUS in
// packages/connector/src/errors/codes.ts exactly (a test parses both and compares).
// Ranges: -1..-99 arguments and memory, -100..-199 network and peers,
// -200..-299 metadata and routing, -300..-399 system and lifecycle.
#pragma once

#include <cstdint>

namespace te {

enum Status : int32_t {
  TE_OK = 0,
  TE_INVALID_ARGUMENT = -1,
  TE_ADDRESS_OUT_OF_RANGE = -2,
  TE_MEMORY_NOT_REGISTERED = -3,
  TE_MEMORY_OVERLAP = -4,
  TE_MEMORY_KIND_UNSUPPORTED = -5,
  TE_UNSUPPORTED_OPERATION = -6,
  TE_DATA_CORRUPTED = -7,  // a verified write's landed bytes differ from those sent
  TE_PEER_UNREACHABLE = -100,
  TE_CONNECTION_LOST = -101,
  TE_AUTH_FAILED = -102,
  TE_BAD_FRAME = -103,
  TE_PROTOCOL_MISMATCH = -104,
  TE_PEER_FAILED = -105,
  TE_PEER_NOT_FOUND = -200,
  TE_STALE_DESCRIPTOR = -201,
  TE_NO_COMMON_TRANSPORT = -202,
  TE_TIMEOUT = -300,
  TE_ABORTED = -301,
  TE_INTERNAL = -302,
  TE_OUT_OF_MEMORY = -303,
  TE_NO_DEVICE = -304,
  TE_PROVIDER_UNAVAILABLE = -305,
  TE_POOL_EXHAUSTED = -306,
  TE_TRANSFER_FAILED = -307,
};

/** The code name of a status ("OK", "ADDRESS_OUT_OF_RANGE", ...); "INTERNAL" for an unknown value. */
const char* status_name(int32_t status);

}  // namespace te
