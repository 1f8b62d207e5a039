// mooncake-shm transport: the facade the addon drives (see transport.h).
#include "transport.h"

#include "client.h"
#include "server.h"
#include "te/hex.h"

namespace teshm {

Transport::Transport(Options o, EventSink sink) : opt_(std::move(o)), sink_(std::move(sink)) {
  if (opt_.copy_threads == 0) opt_.copy_threads = 1;
  if (opt_.copy_threads > kMaxCopyThreads) opt_.copy_threads = kMaxCopyThreads;
  if (opt_.chunk_bytes == 0) opt_.chunk_bytes = 256 << 10;
  server_ = std::make_unique<Server>(this, opt_, registry_);
  client_ = std::make_unique<Client>(this, opt_, registry_, pools_);
}

Transport::~Transport() { close(); }

Status Transport::start(std::string* err) {
  Status s = server_->start(err);
  if (s == te::TE_OK) s = client_->start(err);
  if (s != te::TE_OK) close();
  return s;
}

uint64_t Transport::open_peer(const std::string& socket_name, uint64_t epoch, const std::string& name) {
  return client_->open_peer(socket_name, epoch, name);
}

ServerStats Transport::server_stats() const { return server_->stats(); }

void Transport::close_peer(uint64_t peer) { client_->close_peer(peer); }

Status Transport::submit(uint64_t peer, const uint8_t* ops, const uint64_t* local, const uint64_t* remote,
                         const uint64_t* lengths, size_t n, const uint8_t* notify, size_t notify_len,
                         uint64_t* batch_id, std::string* err) {
  if (closed_.load()) {
    *err = "transport is closed";
    return te::TE_ABORTED;
  }
  return client_->submit(peer, ops, local, remote, lengths, n, notify, notify_len, batch_id, err);
}

Status Transport::allocate_pool(uint64_t len, std::shared_ptr<LocalPool>* out, std::string* err) {
  return pools_.allocate(len, out, err);
}

Status Transport::free_pool(uint64_t base, std::string* err) {
  std::shared_ptr<LocalPool> p = pools_.find(base, 1);
  if (!p || p->base != base) {
    *err = "no pool allocation starts at 0x" + te::hex(base);
    return te::TE_INVALID_ARGUMENT;
  }
  if (registry_.overlaps(base, p->len)) {
    *err = "the pool at 0x" + te::hex(base) + " is still registered: unregister it before freeing it";
    return te::TE_INVALID_ARGUMENT;
  }
  pools_.release(base);
  client_->forget_pool(p->id);
  return te::TE_OK;
}

void Transport::cancel(uint64_t batch, int32_t status) { client_->cancel(batch, status); }

std::shared_ptr<Batch> Transport::take_batch(uint64_t id) { return client_->take_batch(id); }

void Transport::close() {
  if (closed_.exchange(true)) return;
  // The initiator side first: once it returns no target copies into this process's memory;
  // then the target side, whose copy threads are joined.
  client_->stop();
  server_->stop();
}

Status Transport::deliver_notification(const std::string& from, std::vector<uint8_t> payload) {
  // Costed by payload alone; the sender's name and the event are not charged here.
  if (!notify_budget_.admit(from, payload.size())) return te::TE_POOL_EXHAUSTED;
  emit(Event{Event::NOTIFY, 0, 0, from, std::move(payload)});
  return te::TE_OK;
}

void Transport::notification_taken(const std::string& from, size_t bytes) { notify_budget_.release(from, bytes); }

}  // namespace teshm
