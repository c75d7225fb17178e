// SPDX-License-Identifier: MIT
#include "cuda_driver.hpp"

#include <dlfcn.h>
#include <ferry/ferry.h>
#include <pthread.h>

#include <cerrno>
#include <mutex>
#include <thread>
#include <type_traits>

#include "lanes.hpp"
#include "policy.hpp"
#include "stage.hpp"

extern "C" {
__attribute__((visibility("hidden"))) void* (*ferry_real_dlsym)(void*, const char*) = nullptr;
}

namespace ferry::run {

thread_local int inside = 0;

namespace {
std::atomic<Driver*> the_driver{nullptr};
std::mutex driver_mu;
}  // namespace

Driver* driver_loaded() { return the_driver.load(std::memory_order_acquire); }



// The C library's dlsym, by its version (dlvsym is not one this library
// stands in for): the newest first.
namespace {
__attribute__((constructor)) void resolve_dlsym() {
  if (ferry_real_dlsym != nullptr) return;
  for (const char* v : {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"}) {
    if (void* f = dlvsym(RTLD_NEXT, "dlsym", v)) {
      ferry_real_dlsym = reinterpret_cast<void* (*)(void*, const char*)>(f);
      return;
    }
  }
}

}  // namespace

void* real_dlsym(void* handle, const char* name) {
  resolve_dlsym();
  return ferry_real_dlsym != nullptr ? ferry_real_dlsym(handle, name) : nullptr;
}



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
  sym(d->x_alloc, "cuMemAlloc_v2");
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

namespace {

// Every call ferry makes must exist, or ferry takes no copy at all.
bool complete(const Driver* d) {
  return d != nullptr && d->attrs && d->ctx_current && d->push && d->pop && d->ctx_device && d->device_attr &&
         d->stream_ctx && d->capturing && d->stream_sync && d->host_register && d->host_unregister &&
         d->host_device_ptr && d->write64 && d->htod_async;
}

// *unified (may be null): managed or unified memory, which the host may touch too.
Mem classify(const Driver* d, const void* p, bool* unified = nullptr) {
  unsigned type = 0;
  int managed = 0;
  int attrs[2] = {kCuPointerAttributeMemoryType, kCuPointerAttributeIsManaged};
  void* data[2] = {&type, &managed};
  // Unlike the singular query, this one reports memory the driver does not know as type 0.
  if (d->attrs(2, attrs, data, reinterpret_cast<CUdeviceptr>(p)) != kCudaSuccess) return Mem::other;
  if (unified != nullptr) *unified = managed != 0 || type == kCuMemorytypeUnified;
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
// (portable), and its staging areas as they come (the hooks' ctx is the
// CUcontext itself)
int attach_area(void* h, void* area, uint64_t bytes) {
  const Driver* d = driver();
  InContext in(d, static_cast<CUcontext>(h));
  const CUresult r = d->host_register(area, bytes, kCuMemhostregisterPortable | kCuMemhostregisterDevicemap);
  return r == kCudaSuccess || r == kCudaErrorHostMemoryAlreadyRegistered ? 0 : -EIO;
}

void detach_area(void* h, void* area, uint64_t) {
  const Driver* d = driver();
  InContext in(d, static_cast<CUcontext>(h));
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
  h.ctx = ctx;
  h.attach = attach_area;
  h.detach = detach_area;
  return ferry_set_staging_hooks(c, &h);
}

// The lane goes (its copies all done): the segment's registration first.
void unprepare(ferry_client* c, uint64_t, void* arg) {
  ferry_timeline tl{};
  tl.size = sizeof tl;
  if (ferry_get_timeline(c, &tl) == 0) detach_area(arg, tl.segment, tl.segment_bytes);
}

// ---- the staged copy: ferry_upload_direct's ops on a stream
struct CuCopy {
  const Driver* d;
  CUstream stream;
  CUdeviceptr dst;
  CUcontext ctx;
  CUdeviceptr word;  // the direct timeline word, as the device sees it
  bool sync_first;   // a synchronous copy: the stream is waited for first
};

// The lane's timeline word as the device sees it; the stream waited for
// first when the copy is synchronous, as the driver's own does.
int cu_before(ferry_client* c, void* p) {
  auto* cc = static_cast<CuCopy*>(p);
  ferry_timeline tl{};
  tl.size = sizeof tl;
  if (int r = ferry_get_timeline(c, &tl); r != 0) return r;
  if (cc->d->host_device_ptr(&cc->word, const_cast<uint64_t*>(tl.direct_completed), 0) != kCudaSuccess) return -EIO;
  if (cc->sync_first && cc->d->stream_sync(cc->stream) != kCudaSuccess) return -EIO;
  return 0;
}

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

}  // namespace

namespace {
// What the policy needs to know of a copy on `stream`, and the stream's context.
Copy cuda_facts(const Driver* d, void* dst, const void* src, size_t n, CUstream stream, uint64_t min_bytes,
                CUcontext* ctx) {
  Copy facts;
  facts.bytes = n;
  facts.min_bytes = min_bytes;
  bool unified = false;
  facts.dst = classify(d, dst, &unified);
  facts.src = classify(d, src);
  // A copy into memory the host may read or write too (managed, unified)
  // is synchronous with the host in CUDA's contract: the driver's.
  if (unified) facts.queue = FERRY_PASS_UNSUPPORTED;
  int capture = kCuStreamCaptureStatusNone;
  if (d->capturing(stream, &capture) != kCudaSuccess || d->stream_ctx(stream, ctx) != kCudaSuccess || *ctx == nullptr)
    facts.queue = FERRY_PASS_UNSUPPORTED;
  else if (capture != kCuStreamCaptureStatusNone)
    facts.queue = FERRY_PASS_CAPTURED;
  return facts;
}
}  // namespace

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
  CUcontext ctx = nullptr;
  const Copy facts = cuda_facts(d, dst, src, n, stream, lanes.settings().cuda_min_bytes, &ctx);
  // A per-thread stream is another stream on each thread: named by both.
  Queue q;
  q.id = per_thread ? (static_cast<uint64_t>(pthread_self()) | 1) : reinterpret_cast<uint64_t>(stream);
  q.context = reinterpret_cast<uint64_t>(ctx);
  q.prepare = prepare;
  q.unprepare = unprepare;
  q.arg = ctx;
  CuCopy cc{d, stream, reinterpret_cast<CUdeviceptr>(dst), ctx, 0, sync_first};
  ferry_direct_ops ops{};
  // No copy waits for a staging area to be made (registering one costs
  // more than the driver's copy of it): one is made in the background for
  // the copies after it. Meanwhile an asynchronous copy waits for room in
  // the lane's staging, through which it runs piece by piece behind the
  // stream (the driver's own path would wait for the whole stream too); a
  // synchronous one, whose stream is idle already, goes to the driver.
  ops.flags = (per_thread ? FERRY_DIRECT_CALLER_THREAD : 0u) | FERRY_DIRECT_GROW_LATER |
              (sync_first ? FERRY_DIRECT_NO_WAIT : 0u);
  ops.ctx = &cc;
  ops.copy = cu_copy;
  ops.write = cu_write;
  return stage(facts, q, src, ops, cu_before, &cc) == kStaged;
}

namespace {
// The contexts a lane was readied for ahead: one per device a program uses,
// so a few slots; past them a context's first copy readies its own lane.
constexpr size_t kAheadContexts = 16;
std::atomic<CUcontext> ahead_contexts[kAheadContexts];
}  // namespace

void allocated() {
  if (inside != 0) return;
  Driver* d = driver();
  const Settings& settings = Lanes::get().settings();
  if (!complete(d) || settings.off || settings.ahead_bytes == 0) return;
  CUcontext ctx = nullptr;
  if (d->ctx_current(&ctx) != kCudaSuccess || ctx == nullptr) return;
  for (auto& slot : ahead_contexts) {
    CUcontext seen = slot.load(std::memory_order_acquire);
    if (seen == ctx) return;
    if (seen != nullptr || !slot.compare_exchange_strong(seen, ctx)) {
      if (seen == ctx) return;
      continue;
    }
    // A lane bound to no stream (queue 0: no CUDA stream is named so), which
    // the context's first copy takes on as an idle lane, prepared already,
    // with an area made ahead on libferry's thread (registering 64 MiB takes
    // longer than the copy it is for).
    try {
      std::thread([ctx, bytes = settings.ahead_bytes] {
        Inside guard;
        int why = 0;
        Lanes& lanes = Lanes::get();
        if (ferry_client* c = lanes.acquire(0, reinterpret_cast<uint64_t>(ctx), 0, prepare, unprepare, ctx, &why,
                                            Lanes::kConnectWaitUnsafe)) {
          (void)ferry_staging_grow(c, bytes);
          lanes.done(c, 0);
        }
      }).detach();
    } catch (...) {
      // No thread to be had: the first copy readies its lane itself.
    }
    return;
  }
}

}  // namespace ferry::run
