// SPDX-License-Identifier: MIT
// The CUDA interposer's core: the driver's functions it calls and those it
// stands in for, resolved once the program has loaded libcuda, and the one
// path every copy it takes goes through (staged). cuda_run.cpp holds the
// exported functions that call it.
#pragma once

#include <atomic>
#include <cstddef>

#include "cuda_abi.hpp"

extern "C" {
// The C library's dlsym (cuda_run.cpp's dlsym jumps to it).
extern void* (*ferry_real_dlsym)(void*, const char*);
}

namespace ferry::run {

using namespace cu;

// >0 while a copy of ours is being decided or made on this thread: the
// driver's wrappers beneath a runtime wrapper then go straight to the driver.
extern thread_local int inside;
struct Inside {
  Inside() { ++inside; }
  ~Inside() { --inside; }
};

// The driver, once the program loaded it: what ferry calls, and the
// exported functions this library stands in for (x_: to compare entry points with).
struct Driver {
  GetProcAddressV2 gpa2 = nullptr;
  GetProcAddressV1 gpa1 = nullptr;
  PointerGetAttributes attrs = nullptr;
  CtxGetCurrent ctx_current = nullptr;
  CtxPushCurrent push = nullptr;
  CtxPopCurrent pop = nullptr;
  CtxGetDevice ctx_device = nullptr;
  DeviceGetAttribute device_attr = nullptr;
  StreamGetCtx stream_ctx = nullptr;
  StreamIsCapturing capturing = nullptr;
  StreamSynchronize stream_sync = nullptr;
  MemHostRegister host_register = nullptr;
  MemHostUnregister host_unregister = nullptr;
  MemHostGetDevicePointer host_device_ptr = nullptr;
  StreamWriteValue64 write64 = nullptr;
  MemcpyHtoDAsync htod_async = nullptr;
  MemcpyHtoDAsync x_htod_async = nullptr, x_htod_async_ptsz = nullptr;
  MemcpyHtoD x_htod = nullptr, x_htod_ptds = nullptr;
  MemcpyAsync x_async = nullptr, x_async_ptsz = nullptr;
  Memcpy x_memcpy = nullptr, x_memcpy_ptds = nullptr;
  MemAlloc x_alloc = nullptr;
};

// nullptr until the program has loaded libcuda (looked for again each time until then).
Driver* driver();
// The same without looking: what driver() found so far.
Driver* driver_loaded();
// The C library's dlsym, whoever calls.
void* real_dlsym(void* handle, const char* name);
// Stages a copy of n bytes from src into dst on `stream` (NULL: the
// default stream, per thread with per_thread) when it should be; true once
// it is done so, false when the caller is to call the real function (the
// reason counted). `sync_first`: a synchronous copy, which waits for the
// stream first as the driver's own does.
bool staged(void* dst, const void* src, size_t n, CUstream stream, bool per_thread, bool sync_first);
// The program allocated device memory in the current context: the first
// time for a context, a lane is connected and prepared for it in the
// background, with a staging area made ahead (Settings::ahead_bytes), so
// that its first upload finds them ready.
void allocated();

}  // namespace ferry::run
