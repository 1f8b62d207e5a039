// The few libuv calls the completion bridge makes on the env's event loop
// (napi_get_uv_event_loop), declared here because addons build against Node-API's headers
// alone, which do not ship uv.h. The symbols come from the Node binary at load time, as
// every addon's Node-API symbols do. Only functions are used, no struct layout: the handle
// is allocated at the size libuv reports and its user data read through libuv's accessors
// (libuv 1.19 and later; every supported Node has a newer one).
#pragma once

#include <cstddef>

extern "C" {
typedef struct uv_loop_s uv_loop_t;
typedef struct uv_handle_s uv_handle_t;
typedef struct uv_async_s uv_async_t;
typedef void (*uv_async_cb)(uv_async_t* handle);
typedef void (*uv_close_cb)(uv_handle_t* handle);

size_t uv_handle_size(int type);
int uv_async_init(uv_loop_t* loop, uv_async_t* async, uv_async_cb cb);
int uv_async_send(uv_async_t* async);
void uv_close(uv_handle_t* handle, uv_close_cb cb);
void uv_ref(uv_handle_t* handle);
void uv_unref(uv_handle_t* handle);
void* uv_handle_get_data(const uv_handle_t* handle);
void uv_handle_set_data(uv_handle_t* handle, void* data);
}

namespace te::napi {
/** libuv's UV_ASYNC (the first entry of its handle types, stable across libuv 1.x). */
constexpr int kUvAsync = 1;
}  // namespace te::napi
