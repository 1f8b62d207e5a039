// The transport shared by mooncake-intra-nvlink (CUDA IPC) and mooncake-nvlink (cuMem VMM):
// registered memory, peers with their published buffers, bounds checks and the copy engine.
// What differs (how memory is exported and how a peer's allocation is opened here) is a
// Backend.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "te/cuda/copy_engine.h"
#include "te/cuda/errors.h"
#include "te/memory_registry.h"

namespace te::cuda {

/** What registration exports for one region (published to peers in the buffer's attrs). */
struct ExportInfo {
  uint64_t base = 0;  // start of the allocation holding the region (exporter's address)
  uint64_t size = 0;  // size of that allocation
  int device = 0;
  std::vector<uint8_t> handle;  // IPC handle / fabric handle bytes (empty for posix-fd)
  uint64_t alloc_id = 0;        // posix-fd: the id the exporter serves the fd under
};

/** An allocation a peer published (one per distinct base). */
struct RemoteAlloc {
  uint64_t base = 0, size = 0;
  int device = 0;
  std::vector<uint8_t> handle;
  uint64_t alloc_id = 0;
};

/** A registered, remote-accessible buffer of a peer, inside allocs[alloc]. */
struct RemoteBuffer {
  uint64_t addr = 0, length = 0;
  uint32_t alloc = 0;
};

/** What openPeer learns from the peer's descriptor (validated in TypeScript). */
struct PeerInfo {
  std::string name;
  uint64_t epoch = 0;
  bool local = false;  // same process: remote addresses are ours
  std::string socket;  // backend-specific endpoint (nvlink posix-fd: unix socket name)
  std::vector<RemoteAlloc> allocs;
  std::vector<RemoteBuffer> buffers;  // sorted by addr, disjoint
};

/** A peer allocation opened in this process. */
struct Import {
  uint64_t mapped = 0;  // where the allocation's base is mapped here
  uint64_t size = 0;
  int open_device = 0;
  uint64_t access_mask = 0;  // devices granted access (VMM)
  uint64_t handle = 0;       // backend-specific (VMM: the imported generic handle)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  /** Checks that [addr, addr+len) on `device` can be exported and exports it. */
  virtual Error export_region(uint64_t addr, uint64_t len, int device, ExportInfo* out) = 0;
  /** The region exported with `info` was unregistered. */
  virtual void unexport(const ExportInfo& info) {}
  /** Opens a peer allocation here (on that peer's preparation thread, once per allocation). */
  virtual Error open(const PeerInfo& peer, const RemoteAlloc& alloc, int local_device, Import* out) = 0;
  /** Lets `local_device` reach an opened allocation (VMM access); default: nothing to do. */
  virtual Error grant(Import& imp, int local_device) { return Error::none(); }
  virtual void close(Import& imp) = 0;
  /** The transport closed: release process-wide services (sockets); imports may still close later. */
  virtual void stop() {}
};

struct TransportOptions {
  CopyEngineOptions copy;
};

/** A completed batch, as handed to the addon. */
using BatchDone = std::function<void(std::shared_ptr<CopyBatch>)>;

class CudaTransport {
 public:
  CudaTransport(std::shared_ptr<Backend> backend, TransportOptions options, BatchDone done);
  ~CudaTransport();

  /** Registers [addr, addr+len) of `device`. Fills `out` with what peers need. */
  Error register_memory(uint64_t addr, uint64_t len, int device, bool remote, ExportInfo* out);
  /** Removes a registration and waits until no batch uses it (call off the JS thread). */
  Error unregister_memory(uint64_t addr);
  /** Returns a peer id. A peer seen before with another epoch loses its imports. */
  uint64_t open_peer(PeerInfo info);
  void close_peer(uint64_t id);
  /** Queues a batch; PEER_NOT_FOUND for an unknown peer. */
  Error submit(uint64_t peer, const uint8_t* ops, const uint64_t* local, const uint64_t* remote,
               const uint64_t* lengths, size_t n, uint64_t* id_out);
  void cancel(uint64_t id, int32_t status);
  void close();
  size_t imports_open() const;

 private:
  struct LocalRegion {
    uint64_t length = 0;
    int device = 0;
    bool remote = false;
    ExportInfo info;
  };
  struct ImportEntry;
  struct Segment;
  struct Peer;
  /** Checks every request of `b` and turns the valid ones into copy operations (imports opened as needed). */
  void prepare(CopyBatch& b, const std::shared_ptr<Peer>& peer);
  /** prepare for request `i`: a copy operation, or the request fails; `kept`: imports `b` already keeps. */
  void prepare_request(CopyBatch& b, uint32_t i, const Peer& peer, std::vector<ImportEntry*>* kept);
  /** Request `i`'s remote range in another process, mapped here (`*rptr`); false: `i` failed. */
  bool map_remote(CopyBatch& b, uint32_t i, const Peer& peer, int device, std::vector<ImportEntry*>* kept,
                  uint64_t* rptr);
  /** The segment's import of `alloc`, created (not yet opened) on first use. */
  std::shared_ptr<ImportEntry> import_entry(Segment& seg, const RemoteAlloc& alloc);
  /** Opens `entry` on `device` the first time, then grants `device` access to it. */
  Error open_import(ImportEntry& entry, const PeerInfo& info, const RemoteAlloc& alloc, int device);
  /** A preparation thread: takes a peer with queued batches, prepares them in order, hands them on. */
  void prepare_loop();
  bool local_device_of(uint64_t addr, int* device) const;

  std::shared_ptr<Backend> backend_;
  MemoryRegistry registry_;
  mutable std::shared_mutex local_mu_;
  std::map<uint64_t, LocalRegion> local_;
  std::mutex peers_mu_;
  std::unordered_map<uint64_t, std::shared_ptr<Peer>> peers_;
  std::unordered_map<std::string, std::shared_ptr<Segment>> segments_;
  uint64_t next_peer_ = 1;
  std::atomic<uint64_t> next_batch_{1};
  std::unique_ptr<CopyEngine> engine_;
  std::shared_ptr<CopyRuntime> rt_;
  bool closed_ = false;
  // Preparation (bounds checks and imports, which can block on a peer) runs on a few
  // threads of its own, one peer at a time per thread, never on the copy thread.
  static constexpr size_t kPrepThreads = 4;
  std::mutex prep_mu_;
  std::condition_variable prep_cv_;
  std::deque<std::shared_ptr<Segment>> prep_ready_;                   // peers with batches queued and no thread on them
  std::unordered_map<uint64_t, std::weak_ptr<CopyBatch>> preparing_;  // cancel reaches them here
  std::vector<std::thread> prep_threads_;
  size_t prep_idle_ = 0;
  bool prep_stop_ = false;
};

}  // namespace te::cuda
