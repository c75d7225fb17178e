// SPDX-License-Identifier: MIT
// ferry-run's CUDA side, loaded with LD_PRELOAD: the runtime's and the
// driver's copy functions as programs reach them.
//   - the runtime's exports (libcudart.so: PyTorch, CuPy, C/C++ linked with
//     -cudart shared): cudaMemcpyAsync, cudaMemcpy, contiguous
//     cudaMemcpy2DAsync, and their per-thread-stream forms;
//   - the driver's exports (libcuda.so: -lcuda): cuMemcpyHtoD(Async)_v2,
//     cuMemcpy(Async), per-thread forms too;
//   - the driver entry points that cuGetProcAddress, cudaGetDriverEntryPoint
//     and dlsym on libcuda's handle hand out (how a statically linked runtime
//     and several frameworks find driver functions): the same functions come
//     back as this library's.
// A pageable source copied into device memory is staged into ferry's pinned
// staging and the program's stream copies from there (ferry_upload_direct);
// every other copy, and any copy ferry cannot take now, goes to the real
// function as it was called. A copy taken through the runtime is not looked
// at again by the driver's wrappers beneath it (one decision per call).
#include <dlfcn.h>
#include <ferry/ferry.h>
#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <type_traits>

#include "cuda_abi.hpp"
#include "lanes.hpp"
#include "policy.hpp"

#define FERRY_EXPORT extern "C" __attribute__((visibility("default")))

using namespace ferry::run::cu;

extern "C" {
// The C library's dlsym (set before any other code of the program runs; see
// the dlsym entry below).
__attribute__((visibility("hidden"))) void* (*ferry_real_dlsym)(void*, const char*) = nullptr;
}

namespace ferry::run {
namespace {

thread_local int inside = 0;  // >0 while a copy of ours is being decided or made on this thread

struct Inside {
  Inside() { ++inside; }
  ~Inside() { --inside; }
};

// The C library's dlsym, by its version (dlvsym is not one this library
// stands in for): the newest first.
__attribute__((constructor)) void resolve_dlsym() {
  if (ferry_real_dlsym != nullptr) return;
  for (const char* v : {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"}) {
    if (void* f = dlvsym(RTLD_NEXT, "dlsym", v)) {
      ferry_real_dlsym = reinterpret_cast<void* (*)(void*, const char*)>(f);
      return;
    }
  }
}

void* real_dlsym(void* handle, const char* name) {
  resolve_dlsym();
  return ferry_real_dlsym != nullptr ? ferry_real_dlsym(handle, name) : nullptr;
}

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
};

std::atomic<Driver*> the_driver{nullptr};
std::mutex driver_mu;

// nullptr until the program has loaded libcuda (looked for again each time until then).
Driver* driver() {
  if (Driver* d = the_driver.load(std::memory_order_acquire)) return d;
  std::lock_guard lock(driver_mu);
  if (Driver* d = the_driver.load(std::memory_order_acquire)) return d;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return nullptr;
  auto* d = new Driver;
  auto sym = [&](auto& f, const char* name) { f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(real_dlsym(lib, name)); };
  sym(d->gpa2, "cuGetProcAddress_v2");
  sym(d->gpa1, "cuGetProcAddress");
  sym(d->x_htod_async, "cuMemcpyHtoDAsync_v2");
  sym(d->x_htod_async_ptsz, "cuMemcpyHtoDAsync_v2_ptsz");
  sym(d->x_htod, "cuMemcpyHtoD_v2");
  sym(d->x_htod_ptds, "cuMemcpyHtoD_v2_ptds");
  sym(d->x_async, "cuMemcpyAsync");
  sym(d->x_async_ptsz, "cuMemcpyAsync_ptsz");
  sym(d->x_memcpy, "cuMemcpy");
  sym(d->x_memcpy_ptds, "cuMemcpy_ptds");
  // What ferry calls, as a CUDA 12 program gets them (the driver picks the version).
  auto entry = [&](auto& f, const char* name) {
    void* p = nullptr;
    int status = 0;
    if (d->gpa2 != nullptr && d->gpa2(name, &p, 12000, 0, &status) == kCudaSuccess) f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(p);
  };
  entry(d->attrs, "cuPointerGetAttributes");
  entry(d->ctx_current, "cuCtxGetCurrent");
  entry(d->push, "cuCtxPushCurrent");
  entry(d->pop, "cuCtxPopCurrent");
  entry(d->ctx_device, "cuCtxGetDevice");
  entry(d->device_attr, "cuDeviceGetAttribute");
  entry(d->stream_ctx, "cuStreamGetCtx");
  entry(d->capturing, "cuStreamIsCapturing");
  entry(d->stream_sync, "cuStreamSynchronize");
  entry(d->host_register, "cuMemHostRegister");
  entry(d->host_unregister, "cuMemHostUnregister");
  entry(d->host_device_ptr, "cuMemHostGetDevicePointer");
  entry(d->write64, "cuStreamWriteValue64");
  entry(d->htod_async, "cuMemcpyHtoDAsync");
  the_driver.store(d, std::memory_order_release);
  return d;
}

// Every call ferry makes must exist, or ferry takes no copy at all.
bool complete(const Driver* d) {
  return d != nullptr && d->attrs && d->ctx_current && d->push && d->pop && d->ctx_device && d->device_attr &&
         d->stream_ctx && d->capturing && d->stream_sync && d->host_register && d->host_unregister &&
         d->host_device_ptr && d->write64 && d->htod_async;
}

Mem classify(const Driver* d, const void* p) {
  unsigned type = 0;
  int managed = 0;
  int attrs[2] = {kCuPointerAttributeMemoryType, kCuPointerAttributeIsManaged};
  void* data[2] = {&type, &managed};
  // Unlike the singular query, this one reports memory the driver does not know as type 0.
  if (d->attrs(2, attrs, data, reinterpret_cast<CUdeviceptr>(p)) != kCudaSuccess) return Mem::other;
  if (managed != 0 || type == kCuMemorytypeDevice || type == kCuMemorytypeUnified) return Mem::device;
  if (type == kCuMemorytypeHost) return Mem::pinned;
  return type == 0 ? Mem::pageable : Mem::other;
}

// ---- a context made current for a call from another thread
struct InContext {
  const Driver* d;
  bool pushed = false;
  InContext(const Driver* drv, CUcontext ctx) : d(drv) {
    CUcontext cur = nullptr;
    if (d->ctx_current(&cur) == kCudaSuccess && cur == ctx) return;
    pushed = d->push(ctx) == kCudaSuccess;
  }
  ~InContext() {
    CUcontext popped;
    if (pushed) d->pop(&popped);
  }
};

// ---- a lane's client prepared: its staging registered with every context
// (portable), and its staging areas as they come
struct HookCtx {
  CUcontext ctx;
};

int attach_area(void* h, void* area, uint64_t bytes) {
  const Driver* d = driver();
  InContext in(d, static_cast<HookCtx*>(h)->ctx);
  const CUresult r = d->host_register(area, bytes, kCuMemhostregisterPortable | kCuMemhostregisterDevicemap);
  return r == kCudaSuccess || r == kCudaErrorHostMemoryAlreadyRegistered ? 0 : -EIO;
}

void detach_area(void* h, void* area, uint64_t) {
  const Driver* d = driver();
  InContext in(d, static_cast<HookCtx*>(h)->ctx);
  d->host_unregister(area);
}

int prepare(ferry_client* c, uint64_t, void* arg) {
  const Driver* d = driver();
  const auto ctx = static_cast<CUcontext>(arg);
  InContext in(d, ctx);
  CUdevice dev = 0;
  int ops = 0;
  if (d->ctx_device(&dev) != kCudaSuccess) return -EIO;
  d->device_attr(&ops, kCuDeviceAttributeCanUse64BitStreamMemOps, dev);
  if (ops == 0) return -ENOTSUP;
  ferry_timeline tl{};
  tl.size = sizeof tl;
  if (int r = ferry_get_timeline(c, &tl); r != 0) return r;
  const CUresult r = d->host_register(tl.segment, tl.segment_bytes, kCuMemhostregisterPortable | kCuMemhostregisterDevicemap);
  if (r != kCudaSuccess && r != kCudaErrorHostMemoryAlreadyRegistered) return -EIO;
  ferry_staging_hooks h{};
  h.size = sizeof h;
  h.ctx = new HookCtx{ctx};  // lives as long as the client: for the process
  h.attach = attach_area;
  h.detach = detach_area;
  return ferry_set_staging_hooks(c, &h);
}

// ---- the staged copy: ferry_upload_direct's ops on a stream
struct CuCopy {
  const Driver* d;
  CUstream stream;
  CUdeviceptr dst;
  CUcontext ctx;
  CUdeviceptr word;  // the direct timeline word, as the device sees it
};

int cu_copy(void* p, uint64_t off, const void* staging, uint64_t n) {
  auto* c = static_cast<CuCopy*>(p);
  InContext in(c->d, c->ctx);
  return c->d->htod_async(c->dst + off, staging, n, c->stream) == kCudaSuccess ? 0 : -EIO;
}

int cu_write(void* p, volatile uint64_t*, uint64_t value) {
  auto* c = static_cast<CuCopy*>(p);
  InContext in(c->d, c->ctx);
  return c->d->write64(c->stream, c->word, value, 0) == kCudaSuccess ? 0 : -EIO;
}

// Stages a copy of n bytes from src into dst on `stream` (NULL: the
// default stream, per thread with per_thread) when it should be; true once
// it is done so, false when the caller is to call the real function (the
// reason counted). `sync_first`: a synchronous copy, which waits for the
// stream first as the driver's own does.
bool staged(void* dst, const void* src, size_t n, CUstream stream, bool per_thread, bool sync_first) {
  if (inside != 0) return false;  // a runtime wrapper above already decided this call
  Lanes& lanes = Lanes::get();
  if (small(n, lanes.settings().cuda_min_bytes) || dst == nullptr || src == nullptr) {
    lanes.passed(FERRY_PASS_SMALL, n);
    return false;
  }
  Driver* d = driver();
  if (!complete(d)) {
    lanes.passed(FERRY_PASS_UNSUPPORTED, n);
    return false;
  }
  Inside guard;
  if (stream == nullptr) stream = per_thread ? kCuStreamPerThread : kCuStreamLegacy;
  per_thread = stream == kCuStreamPerThread;
  Copy facts;
  facts.bytes = n;
  facts.min_bytes = lanes.settings().cuda_min_bytes;
  facts.dst = classify(d, dst);
  facts.src = classify(d, src);
  int capture = kCuStreamCaptureStatusNone;
  CUcontext ctx = nullptr;
  if (d->capturing(stream, &capture) != kCudaSuccess || d->stream_ctx(stream, &ctx) != kCudaSuccess || ctx == nullptr)
    facts.queue = FERRY_PASS_UNSUPPORTED;
  else if (capture != kCuStreamCaptureStatusNone)
    facts.queue = FERRY_PASS_CAPTURED;
  const Verdict v = decide(facts);
  if (!v.stage) {
    lanes.passed(v.why, n);
    return false;
  }
  // A per-thread stream is another stream on each thread: named by both.
  const uint64_t queue = per_thread ? (static_cast<uint64_t>(pthread_self()) | 1) : reinterpret_cast<uint64_t>(stream);
  int why = FERRY_PASS_ERROR;
  ferry_client* c = lanes.acquire(queue, reinterpret_cast<uint64_t>(ctx), 0, prepare, ctx, &why);
  if (c == nullptr) {
    lanes.passed(why, n);
    return false;
  }
  ferry_timeline tl{};
  tl.size = sizeof tl;
  CuCopy cc{d, stream, reinterpret_cast<CUdeviceptr>(dst), ctx, 0};
  int r = ferry_get_timeline(c, &tl);
  if (r == 0 && d->host_device_ptr(&cc.word, const_cast<uint64_t*>(tl.direct_completed), 0) != kCudaSuccess) r = -EIO;
  if (r == 0 && sync_first && d->stream_sync(stream) != kCudaSuccess) r = -EIO;
  if (r == 0) {
    ferry_direct_ops ops{};
    ops.size = sizeof ops;
    // A synchronous copy waited for its stream already: a new staging area
    // (registering it costs more than the driver's copy) would not pay.
    ops.flags = FERRY_DIRECT_NO_WAIT | (per_thread ? FERRY_DIRECT_CALLER_THREAD : 0u) |
                (sync_first ? FERRY_DIRECT_NO_GROW : 0u);
    ops.ctx = &cc;
    ops.queue = queue;
    ops.queue_context = reinterpret_cast<uint64_t>(ctx);
    ops.copy = cu_copy;
    ops.write = cu_write;
    r = ferry_upload_direct(c, src, n, &ops, nullptr);
  }
  lanes.done(c, r);
  if (r != 0) {
    // Nothing appended, or part: the driver's copy, in full, after it.
    lanes.passed(r == -EAGAIN ? FERRY_PASS_NO_ROOM : FERRY_PASS_ERROR, n);
    return false;
  }
  lanes.staged(n);
  return true;
}

bool to_device(int kind) { return kind == kCudaMemcpyHostToDevice || kind == kCudaMemcpyDefault; }

// The runtime's functions: the next definition after this library's.
template <class Fn>
Fn next(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

cudaError_t rt_async(const char* name, void* dst, const void* src, size_t n, int kind, CUstream s, bool pt) {
  static std::atomic<RtMemcpyAsync> real[2] = {};
  RtMemcpyAsync f = real[pt].load(std::memory_order_relaxed);
  if (f == nullptr) real[pt].store(f = next<RtMemcpyAsync>(name));
  if (f == nullptr) return 3;  // cudaErrorInitializationError: no runtime beneath
  if (to_device(kind) && staged(dst, src, n, s, pt, false)) return kCudaSuccess;
  if (!to_device(kind)) Lanes::get().passed(FERRY_PASS_NOT_UPLOAD, n);
  Inside guard;
  return f(dst, src, n, kind, s);
}

cudaError_t rt_sync(const char* name, void* dst, const void* src, size_t n, int kind, bool pt) {
  static std::atomic<RtMemcpy> real[2] = {};
  RtMemcpy f = real[pt].load(std::memory_order_relaxed);
  if (f == nullptr) real[pt].store(f = next<RtMemcpy>(name));
  if (f == nullptr) return 3;
  if (to_device(kind) && staged(dst, src, n, nullptr, pt, true)) return kCudaSuccess;
  if (!to_device(kind)) Lanes::get().passed(FERRY_PASS_NOT_UPLOAD, n);
  Inside guard;
  return f(dst, src, n, kind);
}

cudaError_t rt_2d(const char* name, void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                  size_t height, int kind, CUstream s, bool pt) {
  static std::atomic<RtMemcpy2DAsync> real[2] = {};
  RtMemcpy2DAsync f = real[pt].load(std::memory_order_relaxed);
  if (f == nullptr) real[pt].store(f = next<RtMemcpy2DAsync>(name));
  if (f == nullptr) return 3;
  // Rows back to back on both sides: one contiguous copy. Pitched rows are the driver's.
  if (to_device(kind) && dpitch == width && spitch == width && height != 0 && width <= SIZE_MAX / height) {
    if (staged(dst, src, width * height, s, pt, false)) return kCudaSuccess;
  } else {
    Lanes::get().passed(to_device(kind) ? FERRY_PASS_UNSUPPORTED : FERRY_PASS_NOT_UPLOAD, width * height);
  }
  Inside guard;
  return f(dst, dpitch, src, spitch, width, height, kind, s);
}

// ---- the driver's functions this library stands in for
#define FERRY_DRIVER_ASYNC(ours, field, pt)                                                              \
  CUresult ours(CUdeviceptr dst, const void* src, size_t n, CUstream s) {                                \
    Driver* d = driver();                                                                               \
    if (staged(reinterpret_cast<void*>(dst), src, n, s, pt, false)) return kCudaSuccess;                 \
    return d != nullptr && d->field != nullptr ? d->field(dst, src, n, s) : kCudaErrorNotFound;        \
  }
#define FERRY_DRIVER_SYNC(ours, field, pt)                                                        \
  CUresult ours(CUdeviceptr dst, const void* src, size_t n) {                                     \
    Driver* d = driver();                                                                        \
    if (staged(reinterpret_cast<void*>(dst), src, n, nullptr, pt, true)) return kCudaSuccess;     \
    return d != nullptr && d->field != nullptr ? d->field(dst, src, n) : kCudaErrorNotFound;    \
  }
FERRY_DRIVER_ASYNC(htod_async, x_htod_async, false)
FERRY_DRIVER_ASYNC(htod_async_ptsz, x_htod_async_ptsz, true)
FERRY_DRIVER_SYNC(htod, x_htod, false)
FERRY_DRIVER_SYNC(htod_ptds, x_htod_ptds, true)

// Unified addresses: the source may be host memory.
CUresult any_async(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, bool pt) {
  Driver* d = driver();
  if (staged(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n, s, pt, false)) return kCudaSuccess;
  MemcpyAsync f = d == nullptr ? nullptr : pt ? d->x_async_ptsz : d->x_async;
  return f != nullptr ? f(dst, src, n, s) : kCudaErrorNotFound;
}
CUresult any_sync(CUdeviceptr dst, CUdeviceptr src, size_t n, bool pt) {
  Driver* d = driver();
  if (staged(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n, nullptr, pt, true)) return kCudaSuccess;
  Memcpy f = d == nullptr ? nullptr : pt ? d->x_memcpy_ptds : d->x_memcpy;
  return f != nullptr ? f(dst, src, n) : kCudaErrorNotFound;
}
CUresult any_async_legacy(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { return any_async(dst, src, n, s, false); }
CUresult any_async_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { return any_async(dst, src, n, s, true); }
CUresult any_sync_legacy(CUdeviceptr dst, CUdeviceptr src, size_t n) { return any_sync(dst, src, n, false); }
CUresult any_sync_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) { return any_sync(dst, src, n, true); }

CUresult gpa2(const char* symbol, void** pfn, int version, uint64_t flags, int* status);
CUresult gpa1(const char* symbol, void** pfn, int version, uint64_t flags);

// An entry point the driver handed out, as this library's own where it
// stands in for that very function (compared by address: a version or
// stream flavour it does not wrap is left alone).
void* ours(void* p) {
  const Driver* d = the_driver.load(std::memory_order_acquire);
  if (p == nullptr || d == nullptr) return p;
  if (p == reinterpret_cast<void*>(d->x_htod_async)) return reinterpret_cast<void*>(&htod_async);
  if (p == reinterpret_cast<void*>(d->x_htod_async_ptsz)) return reinterpret_cast<void*>(&htod_async_ptsz);
  if (p == reinterpret_cast<void*>(d->x_htod)) return reinterpret_cast<void*>(&htod);
  if (p == reinterpret_cast<void*>(d->x_htod_ptds)) return reinterpret_cast<void*>(&htod_ptds);
  if (p == reinterpret_cast<void*>(d->x_async)) return reinterpret_cast<void*>(&any_async_legacy);
  if (p == reinterpret_cast<void*>(d->x_async_ptsz)) return reinterpret_cast<void*>(&any_async_ptsz);
  if (p == reinterpret_cast<void*>(d->x_memcpy)) return reinterpret_cast<void*>(&any_sync_legacy);
  if (p == reinterpret_cast<void*>(d->x_memcpy_ptds)) return reinterpret_cast<void*>(&any_sync_ptds);
  if (p == reinterpret_cast<void*>(d->gpa2)) return reinterpret_cast<void*>(&gpa2);
  if (p == reinterpret_cast<void*>(d->gpa1)) return reinterpret_cast<void*>(&gpa1);
  return p;
}

CUresult gpa2(const char* symbol, void** pfn, int version, uint64_t flags, int* status) {
  Driver* d = driver();
  if (d == nullptr || d->gpa2 == nullptr) return kCudaErrorNotFound;
  const CUresult r = d->gpa2(symbol, pfn, version, flags, status);
  if (r == kCudaSuccess && pfn != nullptr) *pfn = ours(*pfn);
  return r;
}

CUresult gpa1(const char* symbol, void** pfn, int version, uint64_t flags) {
  Driver* d = driver();
  if (d == nullptr || d->gpa1 == nullptr) return kCudaErrorNotFound;
  const CUresult r = d->gpa1(symbol, pfn, version, flags);
  if (r == kCudaSuccess && pfn != nullptr) *pfn = ours(*pfn);
  return r;
}

}  // namespace
}  // namespace ferry::run

namespace fr = ferry::run;

// ---- the runtime's exports
FERRY_EXPORT cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, int kind, CUstream s) {
  return fr::rt_async("cudaMemcpyAsync", dst, src, n, kind, s, false);
}
FERRY_EXPORT cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t n, int kind, CUstream s) {
  return fr::rt_async("cudaMemcpyAsync_ptsz", dst, src, n, kind, s, true);
}
FERRY_EXPORT cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, int kind) {
  return fr::rt_sync("cudaMemcpy", dst, src, n, kind, false);
}
FERRY_EXPORT cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t n, int kind) {
  return fr::rt_sync("cudaMemcpy_ptds", dst, src, n, kind, true);
}
FERRY_EXPORT cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                           size_t height, int kind, CUstream s) {
  return fr::rt_2d("cudaMemcpy2DAsync", dst, dpitch, src, spitch, width, height, kind, s, false);
}
FERRY_EXPORT cudaError_t cudaMemcpy2DAsync_ptsz(void* dst, size_t dpitch, const void* src, size_t spitch,
                                                size_t width, size_t height, int kind, CUstream s) {
  return fr::rt_2d("cudaMemcpy2DAsync_ptsz", dst, dpitch, src, spitch, width, height, kind, s, true);
}
FERRY_EXPORT cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** pfn, unsigned long long flags, int* status) {
  static auto real = fr::next<RtGetDriverEntryPoint>("cudaGetDriverEntryPoint");
  if (real == nullptr) return 3;
  const cudaError_t r = real(symbol, pfn, flags, status);
  if (r == kCudaSuccess && pfn != nullptr) {
    fr::driver();
    *pfn = fr::ours(*pfn);
  }
  return r;
}
FERRY_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** pfn, unsigned version,
                                                          unsigned long long flags, int* status) {
  static auto real = fr::next<RtGetDriverEntryPointByVersion>("cudaGetDriverEntryPointByVersion");
  if (real == nullptr) return 3;
  const cudaError_t r = real(symbol, pfn, version, flags, status);
  if (r == kCudaSuccess && pfn != nullptr) {
    fr::driver();
    *pfn = fr::ours(*pfn);
  }
  return r;
}

// ---- the driver's exports
FERRY_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  return fr::htod_async(dst, src, n, s);
}
FERRY_EXPORT CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  return fr::htod_async_ptsz(dst, src, n, s);
}
FERRY_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) { return fr::htod(dst, src, n); }
FERRY_EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t n) {
  return fr::htod_ptds(dst, src, n);
}
FERRY_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return fr::any_async(dst, src, n, s, false);
}
FERRY_EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return fr::any_async(dst, src, n, s, true);
}
FERRY_EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) { return fr::any_sync(dst, src, n, false); }
FERRY_EXPORT CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return fr::any_sync(dst, src, n, true);
}
FERRY_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, uint64_t flags, int* status) {
  return fr::gpa2(symbol, pfn, version, flags, status);
}
FERRY_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, uint64_t flags) {
  return fr::gpa1(symbol, pfn, version, flags);
}

// ---- dlsym on libcuda's handle
// A program (or a statically linked runtime) that opens libcuda itself gets
// its functions with dlsym: those this library stands in for come back as
// its own. RTLD_NEXT and RTLD_DEFAULT depend on who calls, so those go
// straight on to the C library's dlsym with the caller's return address
// untouched (a tail jump); only lookups on a handle are looked at.
extern "C" __attribute__((visibility("hidden"))) void* ferry_dlsym_hook(void* handle, const char* name) {
  void* r = fr::real_dlsym(handle, name);
  if (r == nullptr || name == nullptr || name[0] != 'c' || name[1] != 'u') return r;
  if (fr::driver() == nullptr) return r;
  return fr::ours(r);
}

extern "C" __attribute__((visibility("hidden"))) void* ferry_dlsym_early(void* handle, const char* name) {
  return fr::real_dlsym(handle, name);  // before the constructor ran: the caller's RTLD_NEXT is lost
}

#if defined(__x86_64__)
__asm__(
    ".text\n"
    ".globl dlsym\n"
    ".type dlsym, @function\n"
    "dlsym:\n"
    "  cmpq $-1, %rdi\n"  // RTLD_NEXT
    "  je 1f\n"
    "  testq %rdi, %rdi\n"  // RTLD_DEFAULT
    "  je 1f\n"
    "  jmp ferry_dlsym_hook\n"
    "1:\n"
    "  movq ferry_real_dlsym(%rip), %rax\n"
    "  testq %rax, %rax\n"
    "  je 2f\n"
    "  jmp *%rax\n"
    "2:\n"
    "  jmp ferry_dlsym_early\n"
    ".size dlsym, .-dlsym\n");
#elif defined(__aarch64__)
__asm__(
    ".text\n"
    ".globl dlsym\n"
    ".type dlsym, %function\n"
    "dlsym:\n"
    "  cmn x0, #1\n"
    "  b.eq 1f\n"
    "  cbz x0, 1f\n"
    "  b ferry_dlsym_hook\n"
    "1:\n"
    "  adrp x16, ferry_real_dlsym\n"
    "  ldr x16, [x16, :lo12:ferry_real_dlsym]\n"
    "  cbz x16, 2f\n"
    "  br x16\n"
    "2:\n"
    "  b ferry_dlsym_early\n"
    ".size dlsym, .-dlsym\n");
#endif
