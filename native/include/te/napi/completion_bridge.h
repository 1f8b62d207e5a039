// Carries events born on native threads to the JS thread. Native threads only push into a
// mutex-protected queue and poke a thread-safe function; the JS-thread callback drains the
// queue in one go. V8 is never touched from a native thread.
#pragma once

#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include "te/napi/values.h"

namespace te::napi {

template <typename Event>
class CompletionBridge {
 public:
  using Handler = std::function<void(Napi::Env, std::vector<Event>&)>;

  /** Created on the JS thread. The object deletes itself once closed and drained. */
  static CompletionBridge* create(Napi::Env env, const char* name, Handler handler) {
    auto* b = new CompletionBridge(std::move(handler));
    napi_value resource_name;
    napi_create_string_utf8(env, name, NAPI_AUTO_LENGTH, &resource_name);
    napi_status s = napi_create_threadsafe_function(env, nullptr, nullptr, resource_name, 0, 1, b, &finalize, b,
                                                    &call_js, &b->tsfn_);
    if (s != napi_ok) {
      delete b;
      throw_status(env, TE_INTERNAL, "cannot create the completion thread-safe function");
    }
    // Idle bridges must not keep the process alive; hold() refs it while work is pending.
    napi_unref_threadsafe_function(env, b->tsfn_);
    return b;
  }

  /** Any thread. Dropped after close(). */
  void push(Event e) {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    queue_.push_back(std::move(e));
    if (!scheduled_) {
      scheduled_ = true;
      napi_call_threadsafe_function(tsfn_, nullptr, napi_tsfn_nonblocking);
    }
  }

  /** JS thread: keep the event loop alive while an operation is pending. */
  void hold(Napi::Env env) {
    if (holds_++ == 0 && !closed_) napi_ref_threadsafe_function(env, tsfn_);
  }
  void unhold(Napi::Env env) {
    if (holds_ > 0 && --holds_ == 0 && !closed_) napi_unref_threadsafe_function(env, tsfn_);
  }

  /** JS thread: deliver what is queued now (used before close). */
  void drain(Napi::Env env) {
    std::vector<Event> events;
    {
      std::lock_guard<std::mutex> lock(mu_);
      events.swap(queue_);
    }
    if (!events.empty() && handler_) handler_(env, events);
  }

  /**
   * JS thread (or env teardown with env = nullptr): stops delivery and releases the
   * thread-safe function. Every native producer must be stopped before this.
   */
  void close(napi_env env) {
    if (env) drain(Napi::Env(env));
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      closed_ = true;
      queue_.clear();
      handler_ = nullptr;
    }
    napi_release_threadsafe_function(tsfn_, napi_tsfn_release);
  }

 private:
  explicit CompletionBridge(Handler h) : handler_(std::move(h)) {}

  static void call_js(napi_env env, napi_value, void* context, void*) {
    auto* b = static_cast<CompletionBridge*>(context);
    std::vector<Event> events;
    Handler h;
    {
      std::lock_guard<std::mutex> lock(b->mu_);
      events.swap(b->queue_);
      b->scheduled_ = false;
      h = b->handler_;
    }
    if (env == nullptr || events.empty() || !h) return;
    try {
      h(Napi::Env(env), events);
    } catch (const Napi::Error& e) {
      // A throwing listener must not take the bridge down; surface it as an uncaught exception.
      napi_throw(env, e.Value());
    }
  }
  static void finalize(napi_env, void* data, void*) { delete static_cast<CompletionBridge*>(data); }

  std::mutex mu_;
  std::vector<Event> queue_;
  bool scheduled_ = false;
  bool closed_ = false;
  int holds_ = 0;
  Handler handler_;
  napi_threadsafe_function tsfn_ = nullptr;
};

}  // namespace te::napi
