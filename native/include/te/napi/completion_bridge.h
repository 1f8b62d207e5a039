// Carries events born on native threads to the JS thread. Native threads only push into a
// mutex-protected queue and wake the JS thread's event loop; the JS-thread callback drains
// the queue in one go. V8 is never touched from a native thread.
//
// The wake-up is a libuv async handle of the env's own loop, sent after the queue's lock is
// released, rather than a Node-API thread-safe function: Node's thread-safe function sends its
// wake-up while holding its queue's lock, so on a busy machine the woken JS thread preempts
// the producer (a transport's rail or I/O thread) inside that lock, blocks on the lock at
// once and has to be woken a second time. uv_async_send takes no lock: one completion costs
// the producer one preemption at most, not two.
#pragma once

#include <atomic>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "te/napi/uv_async.h"
#include "te/napi/values.h"

namespace te::napi {

template <typename Event>
class CompletionBridge {
 public:
  using Handler = std::function<void(Napi::Env, std::vector<Event>&)>;

  /**
   * Created on the JS thread. The object deletes itself once closed and its handle closed by
   * the loop; an env torn down before close() closes it through an async cleanup hook, so the
   * env waits for the handle (a worker's loop must have none left, and its addons are unloaded
   * right after).
   */
  static CompletionBridge* create(Napi::Env env, const char* name, Handler handler) {
    auto* b = new CompletionBridge(env, std::move(handler));
    uv_loop_t* loop = nullptr;
    b->async_ = static_cast<uv_async_t*>(std::calloc(1, uv_handle_size(kUvAsync)));
    if (b->async_ == nullptr || napi_get_uv_event_loop(env, &loop) != napi_ok || loop == nullptr ||
        uv_async_init(loop, b->async_, &on_async) != 0) {
      std::free(b->async_);
      delete b;
      throw_status(env, TE_INTERNAL, "cannot create the completion bridge's wake-up handle");
    }
    uv_handle_set_data(handle(b), b);
    // Idle bridges must not keep the process alive; hold() refs the handle while work is pending.
    uv_unref(handle(b));
    // An async context, so that the handler runs as Node runs any callback from its loop:
    // async hooks see it, and promises it settles are followed up (microtasks) when it returns.
    napi_value resource, resource_name;
    const bool ok = napi_create_object(env, &resource) == napi_ok &&
                    napi_create_string_utf8(env, name, NAPI_AUTO_LENGTH, &resource_name) == napi_ok &&
                    napi_async_init(env, resource, resource_name, &b->context_) == napi_ok &&
                    napi_add_async_cleanup_hook(env, &on_teardown, b, &b->teardown_) == napi_ok;
    if (!ok) {
      b->close(env);
      throw_status(env, TE_INTERNAL, "cannot set up the completion bridge");
    }
    return b;
  }

  /** Any thread. Dropped after close(). */
  void push(Event e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      queue_.push_back(std::move(e));
      if (scheduled_) return;
      scheduled_ = true;
      // Counted under the lock that close() sets closed_ under: close() waits for this send.
      senders_.fetch_add(1, std::memory_order_acq_rel);
    }
    uv_async_send(async_);  // outside the lock: see the top of the file
    senders_.fetch_sub(1, std::memory_order_acq_rel);
  }

  /** JS thread: keep the event loop alive while an operation is pending. */
  void hold(Napi::Env) {
    if (holds_++ == 0 && !closed_) uv_ref(handle(this));
  }
  void unhold(Napi::Env) {
    if (holds_ > 0 && --holds_ == 0 && !closed_) uv_unref(handle(this));
  }

  /** JS thread: deliver what is queued now (used before close). */
  void drain(Napi::Env env) {
    std::vector<Event> events;
    Handler h;
    {
      std::lock_guard<std::mutex> lock(mu_);
      events.swap(queue_);
      h = handler_;
    }
    if (!events.empty() && h) h(env, events);
  }

  /**
   * JS thread (or env teardown, env = nullptr): delivers what is queued (not at teardown),
   * stops delivery and closes the wake-up handle; the bridge is freed once the loop closed it.
   * Every native producer should be stopped first; one still pushing is dropped safely.
   */
  void close(napi_env env) {
    if (env) drain(Napi::Env(env));
    shut();
  }

 private:
  CompletionBridge(napi_env env, Handler h) : env_(env), handler_(std::move(h)) {}

  static uv_handle_t* handle(CompletionBridge* b) { return reinterpret_cast<uv_handle_t*>(b->async_); }

  void shut() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      closed_ = true;
      queue_.clear();
      handler_ = nullptr;
    }
    // A push that passed its check before closed_ was set is finishing its send.
    while (senders_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
    if (context_) napi_async_destroy(env_, context_);
    context_ = nullptr;
    uv_close(handle(this), &on_closed);
  }

  static void on_teardown(napi_async_cleanup_hook_handle, void* arg) { static_cast<CompletionBridge*>(arg)->shut(); }

  static void on_closed(uv_handle_t* h) {
    auto* b = static_cast<CompletionBridge*>(uv_handle_get_data(h));
    // Unregisters the cleanup hook, or, at teardown, tells the env this bridge is done.
    if (b->teardown_) napi_remove_async_cleanup_hook(b->teardown_);
    delete b;
    std::free(h);
  }

  // Whether JS can run in env: Node-API's calls that may run JS (napi_define_properties among
  // them) fail with napi_pending_exception, and no exception pending, once its env is shutting
  // down, which loop callbacks still run into while a worker is terminated.
  static bool can_run_js(napi_env env) {
    napi_value probe;
    bool pending = false;
    if (napi_create_object(env, &probe) != napi_ok) return false;
    if (napi_define_properties(env, probe, 0, nullptr) == napi_ok) return true;
    return napi_is_exception_pending(env, &pending) == napi_ok && pending;
  }

  static void on_async(uv_async_t* async) {
    auto* b = static_cast<CompletionBridge*>(uv_handle_get_data(reinterpret_cast<uv_handle_t*>(async)));
    std::vector<Event> events;
    Handler h;
    {
      std::lock_guard<std::mutex> lock(b->mu_);
      events.swap(b->queue_);
      b->scheduled_ = false;
      h = b->handler_;
    }
    if (events.empty() || !h || b->context_ == nullptr) return;
    napi_env env = b->env_;
    napi_handle_scope scope;
    if (napi_open_handle_scope(env, &scope) != napi_ok) return;
    if (!can_run_js(env)) {
      // The env is shutting down (a worker being terminated): no listener can run any more.
      napi_close_handle_scope(env, scope);
      return;
    }
    // The scope's resource argument is ignored by Node (the context's resource is used).
    napi_value ignored;
    napi_callback_scope callback_scope = nullptr;
    if (napi_get_global(env, &ignored) == napi_ok) napi_open_callback_scope(env, ignored, b->context_, &callback_scope);
    try {
      h(Napi::Env(env), events);
    } catch (const Napi::Error& e) {
      // A throwing listener must not take the bridge down: it is an uncaught exception, as a
      // throw from any callback of the event loop is.
      napi_fatal_exception(env, e.Value());
    }
    bool pending = false;
    napi_value error;
    if (napi_is_exception_pending(env, &pending) == napi_ok && pending &&
        napi_get_and_clear_last_exception(env, &error) == napi_ok)
      napi_fatal_exception(env, error);
    // Closing the outermost callback scope runs the microtasks and the process.nextTick queue.
    if (callback_scope) napi_close_callback_scope(env, callback_scope);
    napi_close_handle_scope(env, scope);
  }

  napi_env env_;
  uv_async_t* async_ = nullptr;  // libuv's handle, freed with the bridge once closed
  napi_async_context context_ = nullptr;
  napi_async_cleanup_hook_handle teardown_ = nullptr;
  std::mutex mu_;
  std::atomic<int> senders_{0};
  std::vector<Event> queue_;
  bool scheduled_ = false;
  bool closed_ = false;
  int holds_ = 0;
  Handler handler_;
};

}  // namespace te::napi
