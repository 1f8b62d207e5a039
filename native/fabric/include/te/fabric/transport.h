// A one-sided RDMA transport over libfabric RDM endpoints (FI_RMA + FI_MSG), shared by
// mooncake-rdma and barex. No libfabric type appears here, so the addons (and the stub
// build without libfabric) compile against this header alone.
//
// Model: one "rail" per NIC (fabric + domain + endpoint + CQ + AV + progress thread).
// Memory is registered in every rail's domain; keys are published per rail. A peer is
// reached rail i -> peer rail (i % peer rails). Slices of a batch are striped over rails.
// Every remote range is validated against the peer's published region table before it is
// posted (providers do not protect uniformly). Control messages (hello, region table,
// revocations, notifications) travel as FI_MSG sends on the same endpoints.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "te/status.h"
#include "te/transport_event.h"

namespace te::fabric {

/** Events carried to the JS thread (by the addon's CompletionBridge). */
using Event = te::TransportEvent;

struct Options {
  std::string segment_name;
  uint64_t epoch = 0;
  /** Provider name ("" = automatic: verbs/efa/... first, then tcp;ofi_rxm, sockets). */
  std::string provider;
  /** Domain (NIC) names to use; empty = all domains of the chosen provider. */
  std::vector<std::string> nics;
  /** Node passed with FI_SOURCE to socket-based providers ("" = provider default). */
  std::string source_address;
  /** Whether the shm provider may be used (it checks neither keys nor bounds). */
  bool allow_shm = false;
  int max_rails = 4;
  /** Endpoints (rails, each with its progress thread) per NIC; 0 = automatic: 1 for hardware
   *  providers, one per 4 CPUs (1 to 4) for socket-based ones, whose progress is CPU work. */
  int rails_per_nic = 0;
  /** CPUs this process may use, as the caller knows them (a cgroup quota included); 0: the affinity mask. */
  int cpus = 0;
  uint64_t slice_size = 1 << 20;
  int window = 64;  // RMA operations in flight per rail
  int connect_timeout_ms = 3000;
  int cancel_grace_ms = 250;
  bool delivery_complete = true;
  bool write_fence = true;  // one delivery-complete write per batch and rail where writes are ordered
  int max_op_parts =
      4;  // slices one RMA may carry as a scatter-gather list (the provider's iov limits bound it; 1: one each)
  int64_t idle_spin_us = 20000;  // a rail polls this long after its last sign of work before it sleeps
  /**
   * Memory the plugin registers once, for local access, on every rail (a pool its transfer
   * memory comes from): [arena_base, arena_base + arena_size); size 0: none. Remote access
   * to arena memory is still granted per registered region, so unregistering revokes it.
   */
  uint64_t arena_base = 0, arena_size = 0;
  /**
   * Non-empty: registrations outside the arena are refused with "memory at X (N bytes) lies
   * outside " followed by this text (the plugin says why and what to set instead).
   */
  std::string outside_arena;
  /** Notifications received from one sender and not yet taken (notification_taken); beyond it more are refused. */
  uint64_t notify_queue_per_peer = 1024;
  /** Bytes of notifications received and not yet taken, all senders together (each counts its payload + 256). */
  uint64_t notify_queue_bytes = 64ull << 20;
  /** The plugin's name, for messages (given by the plugin). */
  std::string plugin;
  /** The plugin's environment prefix ("TE_<NAME>"): messages name its variables; "" names none. */
  std::string env_prefix;
};

struct RailInfo {
  std::string provider, fabric, domain;
  std::vector<uint8_t> addr;  // fi_getname
  bool virt_addr = false;     // FI_MR_VIRT_ADDR: remote address = virtual address
  uint64_t mr_mode = 0;
  uint64_t key_size = 0;
  uint64_t max_msg_size = 0;
  uint64_t inject_size = 0;
  int slices_per_op = 1;                   // slices one RMA carries at most on this rail (scatter-gather)
  uint64_t rma_ops = 0;                    // RMA operations posted so far
  uint64_t rma_slices = 0;                 // slices those operations carried
  uint64_t rma_delivery_complete_ops = 0;  // of those, posted with FI_DELIVERY_COMPLETE
  bool delivery_complete = true;           // writes ask for delivery completion (fixed for the rail's life)
  uint64_t waits = 0;                      // sleeps of the rail's thread on its completion queue
  uint64_t waits_with_data = 0;            // of those, the ones during which the provider moved data
};

/** A remote buffer as published by the peer: [addr, addr+length) inside an MR starting at base. */
struct RemoteRegion {
  uint64_t addr = 0, length = 0, base = 0;
  std::vector<uint64_t> keys;  // one per peer rail
};

struct PeerAddress {
  std::vector<std::vector<uint8_t>> rails;
  std::vector<bool> virt_addr;
  std::string provider;
};

struct BatchOutcome {
  std::vector<int32_t> statuses;
  uint64_t bytes = 0;
  int32_t status = 0;
  std::string message;
  // A write of the batch was on its way when the transport closed: it may still land at the peer.
  bool remote_may_be_written = false;
};

/** Provider discovery (no endpoint created): what fi_getinfo offers, for probe()/doctor. */
struct Discovery {
  bool built_with_libfabric = false;
  std::string version;                 // runtime libfabric version
  std::vector<std::string> providers;  // every provider name fi_getinfo returned (any caps)
  struct Candidate {
    std::string provider, fabric, domain;
    uint64_t mr_mode = 0;
    bool hardware = false;
  };
  std::vector<Candidate> rma;  // RDM + RMA + MSG candidates
  std::string chosen;          // what automatic selection would pick ("" = none)
  std::string message;         // why nothing fits, with what to install
};

Discovery discover(const Options& options);

class Transport {
 public:
  Transport(Options options, std::function<void(Event)> sink);
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  /** Opens rails; PROVIDER_UNAVAILABLE with a precise message when nothing fits. */
  Status start(std::string* err);
  std::vector<RailInfo> rails() const;

  /** Registers [addr, addr+len); keys (per rail) and the MR base are returned. */
  Status register_memory(uint64_t addr, uint64_t len, bool remote, std::vector<uint64_t>* keys, uint64_t* base,
                         std::string* err);
  /** Unregisters; waits until no operation on the range is in flight, then revokes it at peers. */
  Status unregister_memory(uint64_t addr, std::string* err);

  /** Starts the handshake on every rail; an OPEN event reports. Same-process peers need none. */
  uint64_t open_peer(const std::string& name, uint64_t epoch, const PeerAddress& address, bool same_process,
                     const std::vector<RemoteRegion>& regions);
  void close_peer(uint64_t id);
  /** Pings every rail of a peer; a CHECK event carries a JSON report. */
  Status check_peer(uint64_t id, int timeout_ms, uint64_t* check_id, std::string* err);

  Status submit(uint64_t peer, const uint8_t* ops, const uint64_t* local, const uint64_t* remote,
                const uint64_t* lengths, size_t n, const uint8_t* notify, size_t notify_len, uint64_t* id,
                std::string* err);
  std::unique_ptr<BatchOutcome> take_batch(uint64_t id);
  void cancel(uint64_t id, int32_t status);

  /** Whether memory starting at `addr` is registered (an arena's owner frees only unregistered memory). */
  bool is_registered(uint64_t addr) const;

  void close();

  /** A NOTIFY event was handed on (the addon calls it as it delivers one): frees its place in the notification budget.
   */
  void notification_taken(const std::string& from, size_t bytes);

  struct Impl;
  friend struct TransportTestAccess;  // native/fabric/test

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace te::fabric
