// The fabric wire protocol version, in a header of its own so the wire parser (and its fuzz
// target) and the addon share one constant without pulling in the transport.
#pragma once

#include <cstdint>

namespace te::fabric {

/**
 * The version this build speaks: advertised in the segment descriptor (a peer of another
 * version is refused PROTOCOL_MISMATCH at openPeer) and carried in every control message's
 * header. 2: NOTIFY is acknowledged (NOTIFY_ACK).
 */
inline constexpr uint16_t kProtocolVersion = 2;

}  // namespace te::fabric
