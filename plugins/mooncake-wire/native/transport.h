// One mooncake-wire transport: the registered memory, the optional data listener Mooncake
// initiators write into and read from, and the initiator side toward Mooncake targets.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "initiator.h"
#include "target.h"
#include "te/memory_registry.h"

namespace mcwire {

struct TransportOptions {
  bool listen = false;
  TargetOptions target;
  InitiatorOptions initiator;
};

class Transport {
 public:
  Transport(const TransportOptions& o, std::function<void(uint64_t)> on_batch)
      : o_(o), initiator_(o.initiator, registry_, std::move(on_batch)) {}
  te::Status start(std::string* err) {
    if (!o_.listen) return te::TE_OK;
    target_ = std::make_unique<Target>(o_.target, registry_);
    return target_->start(err) ? te::TE_OK : te::TE_INVALID_ARGUMENT;
  }
  uint16_t port() const { return target_ ? target_->port() : 0; }
  te::MemoryRegistry& registry() { return registry_; }
  Initiator& initiator() { return initiator_; }
  Target* target() { return target_.get(); }
  void close_peer(uint64_t id) { initiator_.close_peer(id); }
  void cancel(uint64_t id, int32_t status) { initiator_.cancel(id, status); }
  void close() {
    initiator_.close();
    if (target_) target_->stop();
  }

 private:
  TransportOptions o_;
  te::MemoryRegistry registry_;
  Initiator initiator_;
  std::unique_ptr<Target> target_;
};

}  // namespace mcwire
