// SPDX-License-Identifier: MIT
// The staging copy: the caller's bytes into a slot. A slot is written once
// and read next by the device, never by this CPU, so larger pieces go with
// non-temporal stores: no cache line is read before it is overwritten (no
// read-for-ownership), which is what bounds a plain memcpy into fresh memory.
// Measured on the H200 machine's host with bench/cuda_bench (docs/BENCHMARKS.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#define FERRY_STREAM_STORES 1
#include <emmintrin.h>
#endif

// Sanitizers do not see an intrinsic's loads and stores: the streaming path
// tells them of the whole ranges first, so ASan and TSan check the hot copy
// as they check memcpy.
#if defined(__SANITIZE_ADDRESS__)
extern "C" void __asan_loadN(void* p, size_t n);
extern "C" void __asan_storeN(void* p, size_t n);
#define FERRY_COPY_ACCESS(dst, src, n) (__asan_loadN(const_cast<void*>(src), n), __asan_storeN(dst, n))
#elif defined(__SANITIZE_THREAD__)
extern "C" void __tsan_read_range(const void* p, unsigned long n);
extern "C" void __tsan_write_range(void* p, unsigned long n);
#define FERRY_COPY_ACCESS(dst, src, n) (__tsan_read_range(src, n), __tsan_write_range(dst, n))
#else
#define FERRY_COPY_ACCESS(dst, src, n) ((void)0)
#endif

namespace ferry::client {

// Pieces at least this large are copied with streaming stores; in a build
// with FERRY_TUNING_ENV, $FERRY_STAGE_NT=0 turns them off (for measuring).
inline constexpr size_t kStreamFrom = 16 * 1024;

inline bool stream_stores_enabled() {
#if defined(FERRY_TUNING_ENV)
  static const bool on = [] {
    const char* e = std::getenv("FERRY_STAGE_NT");
    return e == nullptr || std::strcmp(e, "0") != 0;
  }();
  return on;
#else
  return true;
#endif
}

// Copies n bytes to dst (16-byte aligned for the streaming path, taken when
// `stream` and the piece is large enough). The stores are complete (sfence)
// when it returns, so a release store after it publishes them.
inline void stage_copy(void* dst, const void* src, size_t n, bool stream) {
#if defined(FERRY_STREAM_STORES)
  if (stream && n >= kStreamFrom && reinterpret_cast<uintptr_t>(dst) % 16 == 0 && stream_stores_enabled()) {
    FERRY_COPY_ACCESS(dst, src, n);
    auto* d = static_cast<__m128i*>(dst);
    const auto* s = static_cast<const __m128i*>(src);
    const size_t blocks = n / 64;
    for (size_t i = 0; i < blocks; ++i, d += 4, s += 4) {
      const __m128i a = _mm_loadu_si128(s), b = _mm_loadu_si128(s + 1);
      const __m128i c = _mm_loadu_si128(s + 2), e = _mm_loadu_si128(s + 3);
      _mm_stream_si128(d, a);
      _mm_stream_si128(d + 1, b);
      _mm_stream_si128(d + 2, c);
      _mm_stream_si128(d + 3, e);
    }
    _mm_sfence();  // streaming stores are weakly ordered: finish them before the slot is published
    std::memcpy(d, s, n - blocks * 64);
    return;
  }
#else
  (void)stream;
#endif
  std::memcpy(dst, src, n);
}

}  // namespace ferry::client
