// Same-process transfers (the engine's own segment): validated memmove, no provider
// involved, on a thread of its own so that a large copy never runs on the JS thread nor
// holds up a rail. Copies go in 4 MiB steps and stop at a cancel.
#include <pthread.h>

#include <cstring>

#include "impl.h"

namespace te::fabric {

namespace {
constexpr uint64_t kStep = 4ull << 20;
}

void Transport::Impl::copy_locally(std::shared_ptr<Batch> b) {
  {
    std::lock_guard<std::mutex> l(copy_mu);
    if (!copy_thread.joinable())
      copy_thread = std::thread([this] {
        pthread_setname_np(pthread_self(), "te-fi-copy");
        run_local_copies();
      });
    copy_queue.push_back(std::move(b));
  }
  copy_cv.notify_one();
}

void Transport::Impl::run_local_copies() {
  for (;;) {
    std::shared_ptr<Batch> b;
    {
      std::unique_lock<std::mutex> l(copy_mu);
      copy_cv.wait(l, [&] { return copy_stop || !copy_queue.empty(); });
      if (copy_queue.empty()) return;  // stopping, nothing left
      b = std::move(copy_queue.front());
      copy_queue.pop_front();
    }
    for (size_t i = 0; i < b->n; ++i) {
      uint64_t len = b->lengths[i];
      if (!len) continue;
      int32_t cancel = b->cancel_status.load();
      if (cancel) {
        b->statuses[i].store(cancel);
        continue;
      }
      Lease ll, rl;
      Status s = registry.acquire(b->local[i], len, false, ll);
      if (s == TE_OK) s = registry.acquire(b->remote[i], len, true, rl);
      if (s != TE_OK) {
        b->statuses[i].store(s);
        continue;
      }
      bool write = b->ops[i] == 1;
      auto* dst = reinterpret_cast<uint8_t*>(write ? b->remote[i] : b->local[i]);
      auto* src = reinterpret_cast<const uint8_t*>(write ? b->local[i] : b->remote[i]);
      // Overlapping ranges copy in the direction memmove would.
      bool backwards = dst > src && dst < src + len;
      for (uint64_t done = 0; done < len;) {
        if ((cancel = b->cancel_status.load())) break;
        uint64_t n = std::min(kStep, len - done);
        uint64_t off = backwards ? len - done - n : done;
        memmove(dst + off, src + off, n);
        done += n;
      }
      if (cancel) b->statuses[i].store(cancel);
    }
    bool ok = b->cancel_status.load() == 0;
    for (size_t i = 0; ok && i < b->n; ++i) ok = b->statuses[i].load() == 0;
    if (ok && b->has_notify && deliver_notification(opt.segment_name, b->notify) != TE_OK) {
      b->batch_status.store(TE_POOL_EXHAUSTED);
      b->fail_message("this process's notification queue is full (notifyQueuePerPeer / notifyQueueBytes)");
    }
    complete(b);
  }
}

void Transport::Impl::stop_local_copies() {
  {
    std::lock_guard<std::mutex> l(copy_mu);
    copy_stop = true;
    for (auto& b : copy_queue) {
      int32_t zero = 0;
      b->cancel_status.compare_exchange_strong(zero, TE_ABORTED);
    }
  }
  copy_cv.notify_one();
  if (copy_thread.joinable()) copy_thread.join();
}

}  // namespace te::fabric
