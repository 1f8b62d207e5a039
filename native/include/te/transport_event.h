// What a native transport hands to the JS thread: one event type for every transport core
// (mooncake-tcp, mooncake-shm, the libfabric layer), carried by the addon's completion
// bridge and delivered by te::napi::NativeTransportWrap. Plain C++: transport cores and
// their C++ tests include it without Node.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace te {

struct TransportEvent {
  /**
   * BATCH: batch `id` is terminal (the addon takes its results from the transport).
   * OPEN: openPeer `id` finished (`status`, `text` = why it failed).
   * NOTIFY: a notification from segment `text` with `payload`.
   * LOG: a rare warning (`text`) for the engine's log.
   * CHECK: a peer check `id` finished (`text` = its JSON report).
   */
  enum Kind { BATCH, OPEN, NOTIFY, LOG, CHECK } kind = BATCH;
  uint64_t id = 0;
  int32_t status = 0;
  std::string text;
  std::vector<uint8_t> payload;
};

/** Where a transport core pushes its events (any thread; the sink must not block). */
using TransportEventSink = std::function<void(TransportEvent)>;

}  // namespace te
