// SPDX-License-Identifier: MIT
// CUDA backend, on the driver API opened at run time: libcuda.so.1 is never a
// link-time dependency, so ferryd starts (and reports CUDA unavailable) where
// no NVIDIA driver is installed.
//
// One primary context; a non-blocking stream for copies; staging segments
// pinned with cuMemHostRegister; one event per copy, recorded after it, for
// slot recycling. With unified addressing, cuMemcpyAsync takes host and
// device addresses alike, so the seam's void* pointers carry CUdeviceptr.
#include "device/backend.hpp"

#if FERRY_HAVE_CUDA_HEADERS

#include <cuda.h>

#include "device/inflight.hpp"
#include "log.hpp"
#include "device/mps.hpp"
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>

namespace ferry::ferryd {

namespace {

// Each entry: the name cuGetProcAddress knows, and the type cuda.h gives
// (cuda.h maps names like cuMemAlloc to their newest ABI, cuMemAlloc_v2).
#define FERRY_CU_FUNCS(X)              \
  X(cuInit, cuInit)                    \
  X(cuDriverGetVersion, cuDriverGetVersion) \
  X(cuDeviceGetCount, cuDeviceGetCount) \
  X(cuDeviceGet, cuDeviceGet)          \
  X(cuDeviceGetName, cuDeviceGetName)  \
  X(cuDeviceGetAttribute, cuDeviceGetAttribute) \
  X(cuDeviceTotalMem, cuDeviceTotalMem) \
  X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain) \
  X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease) \
  X(cuCtxSetCurrent, cuCtxSetCurrent)  \
  X(cuStreamCreate, cuStreamCreate)    \
  X(cuStreamDestroy, cuStreamDestroy)  \
  X(cuStreamSynchronize, cuStreamSynchronize) \
  X(cuMemAlloc, cuMemAlloc)            \
  X(cuMemFree, cuMemFree)              \
  X(cuMemHostRegister, cuMemHostRegister) \
  X(cuMemHostUnregister, cuMemHostUnregister) \
  X(cuMemcpyAsync, cuMemcpyAsync)      \
  X(cuEventCreate, cuEventCreate)      \
  X(cuEventDestroy, cuEventDestroy)    \
  X(cuEventRecord, cuEventRecord)      \
  X(cuEventQuery, cuEventQuery)        \
  X(cuEventSynchronize, cuEventSynchronize) \
  X(cuGetErrorString, cuGetErrorString) \
  X(cuIpcGetMemHandle, cuIpcGetMemHandle) \
  X(cuIpcOpenMemHandle, cuIpcOpenMemHandle) \
  X(cuIpcCloseMemHandle, cuIpcCloseMemHandle) \
  X(cuMemGetAddressRange, cuMemGetAddressRange)

// Optional: without them the device does not write clients' timelines.
#define FERRY_CU_OPTIONAL(X)                            \
  X(cuStreamWriteValue64, cuStreamWriteValue64)         \
  X(cuMemHostGetDevicePointer, cuMemHostGetDevicePointer) \
  X(cuDeviceGetUuid, cuDeviceGetUuid_v2)                \
  X(cuDeviceGetPCIBusId, cuDeviceGetPCIBusId)

struct Cu {
#define X(name, decl) decltype(&::decl) name = nullptr;
  FERRY_CU_FUNCS(X)
  FERRY_CU_OPTIONAL(X)
#undef X
};

int to_errno(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return 0;
    case CUDA_ERROR_OUT_OF_MEMORY: return -ENOMEM;
    case CUDA_ERROR_INVALID_VALUE: return -EINVAL;
    case CUDA_ERROR_NOT_READY: return -EAGAIN;
    default: return -EIO;
  }
}

class Cuda final : public Backend {
 public:
  ~Cuda() override {
    inflight_.stop();  // its waiter may be looking at one of our events
    if (stream_ != nullptr) {
      current();
      cu_.cuStreamSynchronize(stream_);
      for (CUevent e : all_events_) cu_.cuEventDestroy(e);
      cu_.cuStreamDestroy(stream_);
    }
    if (ctx_ != nullptr) cu_.cuDevicePrimaryCtxRelease(dev_);
  }

  bool open(uint32_t index, std::string& why) {
    if (!load_driver(why)) return false;
    const bool mps = mps_control_present();
    const auto slow = guard_cuda_open(mps);  // MPS's mode, and a context that does not come
    if (CUresult r = cu_.cuInit(0); r != CUDA_SUCCESS) {
      why = "CUDA: cuInit failed: " + error(r);
      return false;
    }
    int n = 0;
    cu_.cuDeviceGetCount(&n);
    if (static_cast<int>(index) >= n) {
      why = "CUDA: no device " + std::to_string(index) + " (" + std::to_string(n) + " found)";
      return false;
    }
    cu_.cuDeviceGet(&dev_, static_cast<int>(index));
    int unified = 0;
    cu_.cuDeviceGetAttribute(&unified, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, dev_);
    if (!unified) {
      why = "CUDA: the device lacks unified addressing";
      return false;
    }
    if (CUresult r = cu_.cuDevicePrimaryCtxRetain(&ctx_, dev_); r != CUDA_SUCCESS) {
      why = "CUDA: cannot retain the primary context: " + error(r);
      return false;
    }
    current();
    if (CUresult r = cu_.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING); r != CUDA_SUCCESS) {
      why = "CUDA: cuStreamCreate failed: " + error(r);
      return false;
    }
    describe(mps);
    return true;
  }

  // libcuda's functions, at the CUDA 12.0 API.
  bool load_driver(std::string& why) {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      why = "CUDA backend unavailable: the NVIDIA driver library libcuda.so.1 is not installed";
      return false;
    }
    using gpa_t = CUresult (*)(const char*, void**, int, cuuint64_t, void* /* CUdriverProcAddressQueryResult*, CUDA 12 */);
    auto gpa = reinterpret_cast<gpa_t>(dlsym(lib, "cuGetProcAddress_v2"));
    if (gpa == nullptr) {
      why = "CUDA backend unavailable: the driver predates CUDA 12 (no cuGetProcAddress_v2)";
      return false;
    }
#define X(name, decl)                                                                          \
  if (gpa(#name, reinterpret_cast<void**>(&cu_.name), 12000, CU_GET_PROC_ADDRESS_DEFAULT,      \
          nullptr) != CUDA_SUCCESS ||                                                          \
      cu_.name == nullptr) {                                                                   \
    why = "CUDA backend unavailable: the driver lacks " #name;                                 \
    return false;                                                                              \
  }
    FERRY_CU_FUNCS(X)
#undef X
#define X(name, decl) \
  if (gpa(#name, reinterpret_cast<void**>(&cu_.name), 12000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr) != CUDA_SUCCESS) \
    cu_.name = nullptr;
    FERRY_CU_OPTIONAL(X)
#undef X
    return true;
  }

  // The device as status shows it, and what it can do.
  void describe(bool mps) {
    char name[256] = {};
    cu_.cuDeviceGetName(name, sizeof name, dev_);
    size_t mem = 0;
    cu_.cuDeviceTotalMem(&mem, dev_);
    int version = 0;
    cu_.cuDriverGetVersion(&version);
    info_.backend = "cuda";
    info_.name = name;
    info_.driver = "CUDA driver API " + std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
    info_.memory_bytes = mem;
    info_.copy_engine = true;  // async copies on a non-blocking stream use the copy engines
    info_.host_import = true;  // cuMemHostRegister
    int mem_ops = 0;
    // The functions come at the 12.0 API (cuGetProcAddress above): their
    // attribute is the v2 memops one, 122, named ..._64_BIT_STREAM_MEM_OPS by
    // CUDA 12's cuda.h and ..._V2 by CUDA 11's (Debian bookworm's), whose
    // ..._64_BIT_STREAM_MEM_OPS is the v1 attribute 93 (0 on a CUDA 12 driver).
    constexpr auto kMemOps64 = static_cast<CUdevice_attribute>(122);
    cu_.cuDeviceGetAttribute(&mem_ops, kMemOps64, dev_);
    info_.device_writes = mem_ops != 0 && cu_.cuStreamWriteValue64 != nullptr && cu_.cuMemHostGetDevicePointer != nullptr;
    info_.sharing = mps ? "mps" : "time-sliced";
    if (CUuuid u{}; cu_.cuDeviceGetUuid != nullptr && cu_.cuDeviceGetUuid(&u, dev_) == CUDA_SUCCESS) {
      unsigned char id[16];
      std::memcpy(id, u.bytes, sizeof id);
      info_.uuid = format_uuid(id, "GPU-");
    }
    // The driver writes "0000:3b:00.0" (4 hex digits of domain); DCGM labels
    // with 8, as nvidia-smi does.
    char bus[32] = {};
    unsigned domain = 0, b = 0, d = 0, f = 0;
    if (cu_.cuDeviceGetPCIBusId != nullptr && cu_.cuDeviceGetPCIBusId(bus, sizeof bus - 1, dev_) == CUDA_SUCCESS &&
        std::sscanf(bus, "%x:%x:%x.%x", &domain, &b, &d, &f) == 4)
      info_.pci_bus_id = format_pci_bus_id(domain, b, d, f);
  }

  const DeviceInfo& info() const override { return info_; }

  int alloc(uint64_t bytes, void** out) override {
    current();
    CUdeviceptr p = 0;
    int r = to_errno(cu_.cuMemAlloc(&p, bytes));
    if (r == 0) *out = reinterpret_cast<void*>(p);
    return r;
  }

  void free(void* ptr) override {
    current();
    cu_.cuMemFree(reinterpret_cast<CUdeviceptr>(ptr));
  }

  int register_host(void* ptr, uint64_t bytes, uint64_t* device) override {
    current();
    *device = 0;
    if (cu_.cuMemHostRegister(ptr, bytes, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP) != CUDA_SUCCESS)
      return -ENOTSUP;
    CUdeviceptr dev = 0;
    if (info_.device_writes && cu_.cuMemHostGetDevicePointer(&dev, ptr, 0) == CUDA_SUCCESS) *device = dev;
    return 0;
  }

  void unregister_host(void* ptr) override {
    current();
    cu_.cuMemHostUnregister(ptr);
  }

  int submit(void* dst, const void* src, uint64_t bytes, uint64_t cookie, const Signal* signal,
             const DeviceWrites* writes) override {
    if (signal != nullptr) return -ENOTSUP;  // no IPC event pools on this backend
    CUdeviceptr words[2] = {};
    const size_t n = writes != nullptr ? writes->n : 0;
    // Each word's device address came with its segment (register_host).
    for (size_t i = 0; i < n; ++i)
      if (!info_.device_writes || (words[i] = writes->w[i].device) == 0) return -ENOTSUP;
    current();
    CUevent ev = take_event();
    if (ev == nullptr) return -ENOMEM;
    CUresult r = CUDA_SUCCESS;
    if (bytes != 0)
      r = cu_.cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src), bytes, stream_);
    // In stream order: after the copy, before the event that retires both.
    for (size_t i = 0; i < n && r == CUDA_SUCCESS; ++i)
      r = cu_.cuStreamWriteValue64(stream_, words[i], writes->w[i].value, 0);
    if (r == CUDA_SUCCESS) r = cu_.cuEventRecord(ev, stream_);
    if (r != CUDA_SUCCESS) {
      give_event(ev);
      return to_errno(r);
    }
    inflight_.push(ev, cookie);
    return 0;
  }

  // A consumer process opens it with cuIpcOpenMemHandle in its own context.
  int export_buffer(void* ptr, IpcHandle* out) override {
    current();
    CUipcMemHandle h{};
    if (cu_.cuIpcGetMemHandle(&h, reinterpret_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS) return -ENOTSUP;
    out->kind = 2;  // proto::kIpcCuda
    static_assert(sizeof h.reserved == sizeof out->data);
    std::memcpy(out->data, h.reserved, sizeof out->data);
    out->fd = -1;
    return 0;
  }

  int import_buffer(const IpcHandle& in, uint64_t bytes, void** out, uint64_t* mapped) override {
    if (in.kind != 2) return -EINVAL;
    current();
    CUipcMemHandle h{};
    std::memcpy(h.reserved, in.data, sizeof h.reserved);
    CUdeviceptr p = 0;
    if (cu_.cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS) return -EINVAL;
    CUdeviceptr base = 0;
    size_t size = 0;
    if (cu_.cuMemGetAddressRange(&base, &size, p) != CUDA_SUCCESS || size - (p - base) < bytes) {
      cu_.cuIpcCloseMemHandle(p);
      return -EINVAL;
    }
    *out = reinterpret_cast<void*>(p);
    *mapped = size;
    return 0;
  }

  void release_import(void* ptr) override {
    current();
    cu_.cuIpcCloseMemHandle(reinterpret_cast<CUdeviceptr>(ptr));
  }

  int open_event_pool(const IpcHandle&, uint32_t, uint64_t*) override { return -ENOTSUP; }
  void close_event_pool(uint64_t) override {}

  // CUDA errors of a failed copy are sticky: the context is unusable after one.
  bool lost() override { return sticky_.load(); }

  size_t reap(std::vector<Done>& out) override {
    current();
    return inflight_.reap(
        out, [&](CUevent e) { return cu_.cuEventQuery(e); }, [](CUresult r) { return r != CUDA_ERROR_NOT_READY; },
        [&](CUresult r) {
          if (r != CUDA_SUCCESS) sticky_ = true;
          return to_errno(r);
        });
  }

  bool arm(int efd) override { return inflight_.arm(efd); }

 private:
  static constexpr int kPollUs = 50;

  std::string error(CUresult r) const {
    const char* s = nullptr;
    if (cu_.cuGetErrorString != nullptr) cu_.cuGetErrorString(r, &s);
    return s != nullptr ? s : ("error " + std::to_string(static_cast<int>(r)));
  }

  // Each thread that calls the driver needs the context current once.
  void current() {
    thread_local CUcontext set = nullptr;
    if (set != ctx_) {
      cu_.cuCtxSetCurrent(ctx_);
      set = ctx_;
    }
  }

  CUevent take_event() {
    if (!free_events_.empty()) {
      CUevent e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
    CUevent e = nullptr;
    if (cu_.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC) != CUDA_SUCCESS) return nullptr;
    all_events_.push_back(e);
    return e;
  }

  void give_event(CUevent e) { free_events_.push_back(e); }

  // The waiter's: polls briefly (small copies end within microseconds),
  // then sleeps (a blocking-sync event wakes its waiter tens of
  // microseconds late).
  bool wait_event(CUevent e) {
    current();
    CUresult r = cu_.cuEventQuery(e);
    const auto poll_end = std::chrono::steady_clock::now() + std::chrono::microseconds(kPollUs);
    while (r == CUDA_ERROR_NOT_READY && std::chrono::steady_clock::now() < poll_end) r = cu_.cuEventQuery(e);
    if (r == CUDA_ERROR_NOT_READY) cu_.cuEventSynchronize(e);
    return true;
  }

  Cu cu_;
  DeviceInfo info_;
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  // Registered host ranges: bytes, device address. The segment pool's thread
  // registers and unregisters; the io thread looks words up.
  std::atomic<bool> sticky_{false};
  std::vector<CUevent> free_events_;
  std::vector<CUevent> all_events_;
  InFlight<CUevent> inflight_{[this](CUevent e) { return wait_event(e); }, [this](CUevent e) { give_event(e); }};
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(uint32_t device, std::string& why) {
  auto b = std::make_unique<Cuda>();
  if (!b->open(device, why)) return nullptr;
  return b;
}

}  // namespace ferry::ferryd

#else  // no CUDA headers at build time

namespace ferry::ferryd {

std::unique_ptr<Backend> make_cuda_backend(uint32_t, std::string& why) {
  why = "CUDA backend unavailable: this ferryd was built without the CUDA toolkit's headers";
  return nullptr;
}

}  // namespace ferry::ferryd

#endif
