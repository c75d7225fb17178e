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

#include "cuda_driver.hpp"
#include "lanes.hpp"
#include "policy.hpp"

#define FERRY_EXPORT extern "C" __attribute__((visibility("default")))

using namespace ferry::run::cu;

namespace ferry::run {
namespace {

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

// Device memory allocated: the context's lane is readied ahead (allocated()).
CUresult mem_alloc(CUdeviceptr* out, size_t bytes) {
  Driver* d = driver();
  if (d == nullptr || d->x_alloc == nullptr) return kCudaErrorNotFound;
  const CUresult r = d->x_alloc(out, bytes);
  if (r == kCudaSuccess) allocated();
  return r;
}

CUresult gpa2(const char* symbol, void** pfn, int version, uint64_t flags, int* status);
CUresult gpa1(const char* symbol, void** pfn, int version, uint64_t flags);

// An entry point the driver handed out, as this library's own where it
// stands in for that very function (compared by address: a version or
// stream flavour it does not wrap is left alone).
void* ours(void* p) {
  const Driver* d = driver_loaded();
  if (p == nullptr || d == nullptr) return p;
  if (p == reinterpret_cast<void*>(d->x_htod_async)) return reinterpret_cast<void*>(&htod_async);
  if (p == reinterpret_cast<void*>(d->x_htod_async_ptsz)) return reinterpret_cast<void*>(&htod_async_ptsz);
  if (p == reinterpret_cast<void*>(d->x_htod)) return reinterpret_cast<void*>(&htod);
  if (p == reinterpret_cast<void*>(d->x_htod_ptds)) return reinterpret_cast<void*>(&htod_ptds);
  if (p == reinterpret_cast<void*>(d->x_async)) return reinterpret_cast<void*>(&any_async_legacy);
  if (p == reinterpret_cast<void*>(d->x_async_ptsz)) return reinterpret_cast<void*>(&any_async_ptsz);
  if (p == reinterpret_cast<void*>(d->x_memcpy)) return reinterpret_cast<void*>(&any_sync_legacy);
  if (p == reinterpret_cast<void*>(d->x_memcpy_ptds)) return reinterpret_cast<void*>(&any_sync_ptds);
  if (p == reinterpret_cast<void*>(d->x_alloc)) return reinterpret_cast<void*>(&mem_alloc);
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
FERRY_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* out, size_t bytes) { return fr::mem_alloc(out, bytes); }
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
