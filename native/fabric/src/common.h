// What every part of the fabric transport uses: the libfabric headers, diagnostics, the
// clock, and the te status of a provider error (libfabric builds only).
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "te/clock.h"
#include "te/fabric/transport.h"
#include "te/hex.h"
#include "te/memory_registry.h"
#include "te/notify_budget.h"
#include "wire.h"

namespace te::fabric {

/** TE_FABRIC_DEBUG set: diagnostics on stderr. Read once per process, not per message. */
inline bool fabric_debug() {
  static const bool on = std::getenv("TE_FABRIC_DEBUG") != nullptr;
  return on;
}

/** A string made safe to embed in the JSON texts of health checks. */
inline std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\')
      o += '\\', o += c;
    else if (static_cast<unsigned char>(c) < 0x20)
      o += ' ';
    else
      o += c;
  }
  return o;
}

/** The te status of a failed completion's error (fi_cq_err_entry::err). */
int32_t status_of_cq_error(int err);
/** The te status of an operation the provider refused to post (its return value, not -FI_EAGAIN). */
int32_t status_of_post_error(int err);

}  // namespace te::fabric
