// te_fabric built without libfabric: the addon loads, and every transport reports
// PROVIDER_UNAVAILABLE with the command that fixes it.
#include "te/fabric/transport.h"

namespace te::fabric {

namespace {
const char* kWhy =
    "this build of the addon has no libfabric: libfabric-dev was not installed when it was compiled. Install it and "
    "rebuild: apt-get install -y libfabric-dev libfabric-bin && npm rebuild (or npm run build:native in the plugin)";
}

struct Transport::Impl {};

Discovery discover(const Options&) {
  Discovery d;
  d.built_with_libfabric = false;
  d.message = kWhy;
  return d;
}

Transport::Transport(Options, std::function<void(Event)>) : impl_(std::make_unique<Impl>()) {}
Transport::~Transport() = default;
Status Transport::start(std::string* err) { return *err = kWhy, TE_PROVIDER_UNAVAILABLE; }
std::vector<RailInfo> Transport::rails() const { return {}; }
Status Transport::register_memory(uint64_t, uint64_t, bool, std::vector<uint64_t>*, uint64_t*, std::string* err) {
  return *err = kWhy, TE_PROVIDER_UNAVAILABLE;
}
Status Transport::unregister_memory(uint64_t, std::string* err) { return *err = kWhy, TE_PROVIDER_UNAVAILABLE; }
uint64_t Transport::open_peer(const std::string&, uint64_t, const PeerAddress&, bool,
                              const std::vector<RemoteRegion>&) {
  return 0;
}
void Transport::close_peer(uint64_t) {}
Status Transport::check_peer(uint64_t, int, uint64_t*, std::string* err) {
  return *err = kWhy, TE_PROVIDER_UNAVAILABLE;
}
Status Transport::submit(uint64_t, const uint8_t*, const uint64_t*, const uint64_t*, const uint64_t*, size_t,
                         const uint8_t*, size_t, uint64_t*, std::string* err) {
  return *err = kWhy, TE_PROVIDER_UNAVAILABLE;
}
std::unique_ptr<BatchOutcome> Transport::take_batch(uint64_t) { return nullptr; }
void Transport::cancel(uint64_t, int32_t) {}
bool Transport::is_registered(uint64_t) const { return false; }
void Transport::close() {}
void Transport::notification_taken(const std::string&, size_t) {}

}  // namespace te::fabric
