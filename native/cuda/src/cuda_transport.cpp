#include "te/cuda/cuda_transport.h"

#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "te/cuda/device.h"
#include "te/hex.h"

namespace te::cuda {

namespace {

std::string alloc_key(const RemoteAlloc& a) {
  std::string k = hex(a.base) + "/" + std::to_string(a.size) + "/" + std::to_string(a.alloc_id) + "/";
  k.append(reinterpret_cast<const char*>(a.handle.data()), a.handle.size());
  return k;
}

// Requests are marked with this until prepare() has looked at them.
constexpr int32_t kUnprepared = 2;

/**
 * A region of `b`'s leases covering [addr, addr+len) (remote-accessible when `remote`), or a
 * new lease on it, kept by the batch until it settles.
 */
Status lease_for(const MemoryRegistry& registry, CopyBatch& b, uint64_t addr, uint64_t len, bool remote,
                 const Region** region) {
  for (auto it = b.leases.rbegin(); it != b.leases.rend(); ++it) {
    if (it->covers(addr, len) && (!remote || it->region()->remote_access)) {
      *region = it->region();
      return TE_OK;
    }
  }
  Lease l;
  Status s = registry.acquire(addr, len, remote, l);
  if (s != TE_OK) return s;
  *region = l.region();
  b.leases.push_back(std::move(l));
  return TE_OK;
}

/**
 * Bounds: request `i`'s remote range must lie inside one buffer the peer published
 * (remote-accessible) and inside its allocation. That allocation, or nullptr (`i` failed).
 */
const RemoteAlloc* published_alloc(CopyBatch& b, uint32_t i, const PeerInfo& info) {
  const uint64_t raddr = b.remote[i], len = b.lengths[i];
  auto it = std::upper_bound(info.buffers.begin(), info.buffers.end(), raddr,
                             [](uint64_t a, const RemoteBuffer& rb) { return a < rb.addr; });
  const RemoteBuffer* buf = it == info.buffers.begin() ? nullptr : &*(it - 1);
  if (!buf || raddr - buf->addr >= buf->length) {
    b.fail(i, TE_MEMORY_NOT_REGISTERED,
           "remote address " + hex(raddr) + " is not in a buffer segment " + info.name +
               " published (refresh its descriptor if it registered memory since)");
    return nullptr;
  }
  if (!range_within(buf->addr, buf->length, raddr, len)) {
    b.fail(i, TE_ADDRESS_OUT_OF_RANGE,
           "remote range " + hex(raddr) + "+" + std::to_string(len) + " reaches past the end of the peer buffer " +
               hex(buf->addr) + "+" + std::to_string(buf->length));
    return nullptr;
  }
  const RemoteAlloc& alloc = info.allocs[buf->alloc];
  if (!range_within(alloc.base, alloc.size, raddr, len)) {
    b.fail(i, TE_ADDRESS_OUT_OF_RANGE, "remote range lies outside the allocation the peer published for it");
    return nullptr;
  }
  return &alloc;
}

}  // namespace

struct CudaTransport::ImportEntry {
  std::shared_ptr<Backend> backend;
  std::shared_ptr<CopyRuntime> rt;
  std::mutex mu;
  bool opened = false;
  Import imp;
  ~ImportEntry() {
    if (!opened) return;
    if (rt->set_device(imp.open_device).ok()) backend->close(imp);
  }
};

struct CudaTransport::Segment {
  std::string name;
  uint64_t epoch = 0;
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<ImportEntry>> imports;
  // Batches to this peer waiting for prepare(). Preparing can block (an IPC open, a
  // posix-fd fetch from the peer's socket): each peer gets its own preparation thread while
  // it has batches queued, so a slow peer never holds the copy thread or another peer.
  std::mutex prep_mu;
  std::deque<std::pair<std::shared_ptr<CopyBatch>, std::shared_ptr<Peer>>> prep_queue;
  bool prep_running = false;
};

struct CudaTransport::Peer {
  PeerInfo info;
  std::shared_ptr<Segment> segment;
};

CudaTransport::CudaTransport(std::shared_ptr<Backend> backend, TransportOptions options, BatchDone done)
    : backend_(std::move(backend)), rt_(options.copy.runtime ? options.copy.runtime : cuda_runtime()) {
  engine_ = std::make_unique<CopyEngine>(options.copy, std::move(done));
}

CudaTransport::~CudaTransport() { close(); }

Error CudaTransport::register_memory(uint64_t addr, uint64_t len, int device, bool remote, ExportInfo* out) {
  if (len == 0 || range_overflows(addr, len) || addr == 0)
    return Error::make(TE_INVALID_ARGUMENT, "cannot register an empty, null or wrapping range");
  Error e = rt_->set_device(device);
  if (!e.ok()) return e;
  ExportInfo info;
  e = backend_->export_region(addr, len, device, &info);
  if (!e.ok()) return e;
  Status s = registry_.add(addr, len, remote);
  if (s != TE_OK) {
    backend_->unexport(info);
    return Error::make(s, s == TE_MEMORY_OVERLAP ? "memory at " + hex(addr) + " overlaps a registered region"
                                                 : "cannot register an empty or wrapping range");
  }
  {
    std::unique_lock<std::shared_mutex> lock(local_mu_);
    local_[addr] = LocalRegion{len, device, remote, info};
  }
  *out = info;
  return Error::none();
}

Error CudaTransport::unregister_memory(uint64_t addr) {
  Status s = registry_.remove(addr);  // waits until no batch holds a lease on it
  if (s != TE_OK) return Error::make(s, "no registered memory starts at " + hex(addr));
  ExportInfo info;
  {
    std::unique_lock<std::shared_mutex> lock(local_mu_);
    auto it = local_.find(addr);
    if (it != local_.end()) {
      info = it->second.info;
      local_.erase(it);
    }
  }
  backend_->unexport(info);
  return Error::none();
}

bool CudaTransport::local_device_of(uint64_t start, int* device) const {
  std::shared_lock<std::shared_mutex> lock(local_mu_);
  auto it = local_.find(start);
  if (it == local_.end()) return false;
  *device = it->second.device;
  return true;
}

uint64_t CudaTransport::open_peer(PeerInfo info) {
  std::lock_guard<std::mutex> lock(peers_mu_);
  auto& seg = segments_[info.name];
  if (!seg || seg->epoch != info.epoch) {
    // New peer, or a restarted one: handles of its earlier life are closed once unused.
    seg = std::make_shared<Segment>();
    seg->name = info.name;
    seg->epoch = info.epoch;
  } else {
    // Same life, newer descriptor: drop imports of allocations it no longer publishes.
    std::lock_guard<std::mutex> sl(seg->mu);
    std::unordered_map<std::string, std::shared_ptr<ImportEntry>> kept;
    for (const RemoteAlloc& a : info.allocs) {
      auto it = seg->imports.find(alloc_key(a));
      if (it != seg->imports.end()) kept.emplace(it->first, it->second);
    }
    seg->imports.swap(kept);
  }
  std::sort(info.buffers.begin(), info.buffers.end(),
            [](const RemoteBuffer& a, const RemoteBuffer& b) { return a.addr < b.addr; });
  auto peer = std::make_shared<Peer>();
  peer->info = std::move(info);
  peer->segment = seg;
  uint64_t id = next_peer_++;
  peers_[id] = peer;
  return id;
}

void CudaTransport::close_peer(uint64_t id) {
  std::shared_ptr<Segment> seg;
  {
    std::lock_guard<std::mutex> lock(peers_mu_);
    auto it = peers_.find(id);
    if (it == peers_.end()) return;
    seg = it->second->segment;
    peers_.erase(it);
    for (auto& [pid, p] : peers_)
      if (p->segment == seg) return;  // another handle still uses the imports
    auto s = segments_.find(seg->name);
    if (s != segments_.end() && s->second == seg) segments_.erase(s);
  }
  // `seg` dies here (or with the last batch using it): its imports are closed.
}

size_t CudaTransport::imports_open() const {
  auto* self = const_cast<CudaTransport*>(this);
  std::lock_guard<std::mutex> lock(self->peers_mu_);
  size_t n = 0;
  for (auto& [name, seg] : self->segments_) {
    std::lock_guard<std::mutex> sl(seg->mu);
    for (auto& [k, e] : seg->imports) n += e->opened ? 1 : 0;
  }
  return n;
}

Error CudaTransport::submit(uint64_t peer_id, const uint8_t* ops, const uint64_t* local, const uint64_t* remote,
                            const uint64_t* lengths, size_t n, uint64_t* id_out) {
  std::shared_ptr<Peer> peer;
  {
    std::lock_guard<std::mutex> lock(peers_mu_);
    if (closed_) return Error::make(TE_ABORTED, "transport is closed");
    auto it = peers_.find(peer_id);
    if (it == peers_.end()) return Error::make(TE_PEER_NOT_FOUND, "peer " + std::to_string(peer_id) + " is not open");
    peer = it->second;
  }
  auto b = std::make_shared<CopyBatch>();
  b->id = next_batch_++;
  b->opcodes.assign(ops, ops + n);
  b->local.assign(local, local + n);
  b->remote.assign(remote, remote + n);
  b->lengths.assign(lengths, lengths + n);
  b->statuses.assign(n, kUnprepared);
  *id_out = b->id;
  auto seg = peer->segment;
  {
    std::lock_guard<std::mutex> lock(prep_mu_);
    if (prep_stop_) return Error::make(TE_ABORTED, "transport is closed");
    preparing_[b->id] = b;
    bool queue_peer = false;
    {
      std::lock_guard<std::mutex> sl(seg->prep_mu);
      seg->prep_queue.emplace_back(std::move(b), peer);
      if (!seg->prep_running) queue_peer = seg->prep_running = true;
    }
    if (queue_peer) {
      prep_ready_.push_back(seg);
      if (prep_idle_ == 0 && prep_threads_.size() < kPrepThreads)
        prep_threads_.emplace_back([this] {
          pthread_setname_np(pthread_self(), "te-cuda-prep");
          prepare_loop();
        });
      else
        prep_cv_.notify_one();
    }
  }
  return Error::none();
}

void CudaTransport::prepare_loop() {
  std::unique_lock<std::mutex> lock(prep_mu_);
  for (;;) {
    ++prep_idle_;
    prep_cv_.wait(lock, [&] { return prep_stop_ || !prep_ready_.empty(); });
    --prep_idle_;
    if (prep_ready_.empty()) return;  // stopping, nothing left
    std::shared_ptr<Segment> seg = std::move(prep_ready_.front());
    prep_ready_.pop_front();
    lock.unlock();
    // This peer's batches, in order, until its queue is empty.
    for (;;) {
      std::pair<std::shared_ptr<CopyBatch>, std::shared_ptr<Peer>> next;
      {
        std::lock_guard<std::mutex> sl(seg->prep_mu);
        if (seg->prep_queue.empty()) {
          seg->prep_running = false;
          break;
        }
        next = std::move(seg->prep_queue.front());
        seg->prep_queue.pop_front();
      }
      auto& b = next.first;
      // A batch cancelled while it waited goes on unprepared: the engine ends it with the
      // cancel status and copies nothing.
      if (b->cancel_status.load() == 0) {
        try {
          prepare(*b, next.second);
        } catch (const std::exception& e) {
          b->batch_status = TE_INTERNAL;
          b->error = std::string("preparing the batch failed: ") + e.what();
        }
      }
      {
        std::lock_guard<std::mutex> pl(prep_mu_);
        preparing_.erase(b->id);
      }
      engine_->submit(std::move(b));
    }
    lock.lock();
  }
}

void CudaTransport::cancel(uint64_t id, int32_t status) {
  {
    std::lock_guard<std::mutex> lock(prep_mu_);
    auto it = preparing_.find(id);
    if (it != preparing_.end()) {
      if (auto b = it->second.lock()) {
        int32_t expected = 0;
        b->cancel_status.compare_exchange_strong(expected, status);
      }
    }
  }
  engine_->cancel(id, status);
}

void CudaTransport::prepare(CopyBatch& b, const std::shared_ptr<Peer>& peer) {
  b.keep.push_back(peer);
  std::vector<ImportEntry*> kept;  // imports this batch already keeps open
  for (uint32_t i = 0; i < b.opcodes.size(); ++i) prepare_request(b, i, *peer, &kept);
  for (auto& st : b.statuses)
    if (st == kUnprepared) st = TE_INTERNAL;
}

void CudaTransport::prepare_request(CopyBatch& b, uint32_t i, const Peer& peer, std::vector<ImportEntry*>* kept) {
  const uint64_t len = b.lengths[i], laddr = b.local[i], raddr = b.remote[i];
  if (b.opcodes[i] > 1) {
    b.fail(i, TE_INVALID_ARGUMENT, "opcode must be 0 (read) or 1 (write)");
    return;
  }
  if (len == 0) {
    b.statuses[i] = TE_OK;
    return;
  }
  const Region* lr = nullptr;
  Status s = lease_for(registry_, b, laddr, len, false, &lr);
  if (s != TE_OK) {
    b.fail(i, s,
           "local range " + hex(laddr) + "+" + std::to_string(len) +
               (s == TE_ADDRESS_OUT_OF_RANGE ? " reaches past its registered region"
                                             : " is not registered memory of this process"));
    return;
  }
  int device = 0;
  if (!local_device_of(lr->addr, &device)) {
    b.fail(i, TE_MEMORY_NOT_REGISTERED, "local region " + hex(lr->addr) + " was unregistered");
    return;
  }
  uint64_t rptr = 0;
  if (peer.info.local) {
    const Region* rr = nullptr;
    s = lease_for(registry_, b, raddr, len, true, &rr);
    if (s != TE_OK) {
      b.fail(i, s,
             "remote range " + hex(raddr) + "+" + std::to_string(len) +
                 " is not registered, remote-accessible memory of this process");
      return;
    }
    rptr = raddr;
  } else if (!map_remote(b, i, peer, device, kept, &rptr)) {
    return;
  }
  CopyOp op;
  op.len = len;
  op.device = device;
  op.index = i;
  op.dst = b.opcodes[i] == 1 ? rptr : laddr;
  op.src = b.opcodes[i] == 1 ? laddr : rptr;
  b.ops.push_back(op);
  b.statuses[i] = kPending;
}

bool CudaTransport::map_remote(CopyBatch& b, uint32_t i, const Peer& peer, int device, std::vector<ImportEntry*>* kept,
                               uint64_t* rptr) {
  const RemoteAlloc* alloc = published_alloc(b, i, peer.info);
  if (!alloc) return false;
  std::shared_ptr<ImportEntry> entry = import_entry(*peer.segment, *alloc);
  Error err = open_import(*entry, peer.info, *alloc, device);
  if (!err.ok()) {
    b.fail(i, err.status, err.message);
    return false;
  }
  if (std::find(kept->begin(), kept->end(), entry.get()) == kept->end()) {
    kept->push_back(entry.get());
    b.keep.push_back(entry);
  }
  *rptr = entry->imp.mapped + (b.remote[i] - alloc->base);
  return true;
}

std::shared_ptr<CudaTransport::ImportEntry> CudaTransport::import_entry(Segment& seg, const RemoteAlloc& alloc) {
  std::lock_guard<std::mutex> sl(seg.mu);
  auto& slot = seg.imports[alloc_key(alloc)];
  if (!slot) {
    slot = std::make_shared<ImportEntry>();
    slot->backend = backend_;
    slot->rt = rt_;
  }
  return slot;
}

Error CudaTransport::open_import(ImportEntry& entry, const PeerInfo& info, const RemoteAlloc& alloc, int device) {
  Error err;
  std::lock_guard<std::mutex> el(entry.mu);
  if (!entry.opened) {
    err = rt_->set_device(device);
    if (err.ok()) err = backend_->open(info, alloc, device, &entry.imp);
    if (err.ok()) {
      entry.opened = true;
      entry.imp.open_device = device;
    }
  }
  if (err.ok()) err = backend_->grant(entry.imp, device);
  return err;
}

void CudaTransport::close() {
  {
    std::lock_guard<std::mutex> lock(peers_mu_);
    if (closed_) return;
    closed_ = true;
  }
  {
    // Batches still waiting for preparation are cut short (handed on unprepared, they end
    // ABORTED); the threads finish the batch in hand, then stop.
    std::lock_guard<std::mutex> lock(prep_mu_);
    prep_stop_ = true;
    for (auto& [id, w] : preparing_)
      if (auto b = w.lock()) {
        int32_t expected = 0;
        b->cancel_status.compare_exchange_strong(expected, TE_ABORTED);
      }
  }
  prep_cv_.notify_all();
  for (auto& t : prep_threads_)
    if (t.joinable()) t.join();
  engine_->stop();
  std::unordered_map<uint64_t, std::shared_ptr<Peer>> peers;
  std::unordered_map<std::string, std::shared_ptr<Segment>> segments;
  {
    std::lock_guard<std::mutex> lock(peers_mu_);
    peers.swap(peers_);
    segments.swap(segments_);
  }
  peers.clear();
  segments.clear();
  std::map<uint64_t, LocalRegion> local;
  {
    std::unique_lock<std::shared_mutex> lock(local_mu_);
    local.swap(local_);
  }
  for (auto& [addr, r] : local) backend_->unexport(r.info);
  backend_->stop();
}

}  // namespace te::cuda
