// SPDX-License-Identifier: MIT
// cuda_bench: ferry on a real NVIDIA GPU (ferryd --backend cuda) against the
// CUDA runtime's direct paths, side by side in one run:
//   pageable-sync   cudaMemcpyAsync from pageable memory + cudaStreamSynchronize
//                   (what a runtime must do so the caller may reuse its buffer)
//   pageable-async  cudaMemcpyAsync from pageable memory, no sync
//   pinned-async    memcpy into pinned (cudaMallocHost) memory + cudaMemcpyAsync
//   ferry           ferry_upload (+ ferry_wait for completion)
// Prints Markdown. usage: cuda_bench --socket PATH [--quick] [--data DIR] [--mps]
#include <sys/resource.h>
#include <cuda_runtime.h>
#include <ferry/cuda.h>
#include <ferry/ferry.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#include "stats.hpp"

namespace {

using namespace ferry::bench;
bool g_quick = false;
std::string g_socket;

#define CU(call)                                                                            \
  do {                                                                                      \
    cudaError_t e_ = (call);                                                                \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "cuda_bench: %s: %s\n", #call, cudaGetErrorString(e_));         \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)
#define FERRY(call)                                                                         \
  do {                                                                                      \
    int r_ = (call);                                                                        \
    if (r_ != 0) {                                                                          \
      std::fprintf(stderr, "cuda_bench: %s: %s\n", #call, ferry_strerror(r_));              \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)


// Occupies the GPU for `ns` nanoseconds (one thread spinning on the global timer).
__global__ void busy(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

struct Ferry {
  ferry_client* c = nullptr;
  Ferry() { FERRY(ferry_connect(g_socket.c_str(), &c)); }
  ~Ferry() { ferry_disconnect(c); }
  ferry_buffer alloc(uint64_t n) {
    ferry_buffer b{};
    FERRY(ferry_buffer_alloc(c, n, &b));
    return b;
  }
};

struct Goals {
  double call_ratio = 0;       // ferry 1 KiB call / pageable async call
  double large_vs_pageable = 0;
  double large_vs_staging = 0;
  double mid_vs_pageable = 0;  // worst ferry / pageable cudaMemcpy from 64 KiB up
  double worst_wait_ms = 0;    // ferry_upload return time behind a 20 ms kernel, worst size up to 64 MiB
  double known_vs_pinned = 0;  // idle 1 KiB: ferry completion known / pinned async + sync
  double loop_vs_pinned = 0;   // ordered loop, ferry device waits / in-process pinned ring
  size_t loop_wrong = SIZE_MAX;
  double direct_vs_pinned = 0;  // the same loop with direct uploads
  size_t direct_wrong = SIZE_MAX;
  double direct_vs_pageable_4_64 = 0;  // direct call behind a 20 ms kernel / pageable async call, worst of 4-64 MiB
  double direct_over_staging = 0;      // direct call behind the kernel / staging memcpy, worst size that fits staging
  double direct_vs_ferry_large = 0;    // direct bandwidth / daemon-appended, worst size >= 64 MiB
} g;
bool g_mps = false;

cudaStream_t s;

// ---------------------------------------------------------------- idle 1 KiB
void idle_small() {
  const int n = g_quick ? 100 : 2000;
  const size_t bytes = 1024;
  std::vector<char> src(bytes, 1);
  char* pinned = nullptr;
  CU(cudaMallocHost(&pinned, bytes));
  void* dst = nullptr;
  CU(cudaMalloc(&dst, bytes));
  std::vector<double> sync_r, async_r, async_d, pin_r, pin_d, fr_r, fr_d;
  for (int i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    CU(cudaMemcpyAsync(dst, src.data(), bytes, cudaMemcpyHostToDevice, s));
    CU(cudaStreamSynchronize(s));
    sync_r.push_back(us_since(t0));
  }
  for (int i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    CU(cudaMemcpyAsync(dst, src.data(), bytes, cudaMemcpyHostToDevice, s));
    async_r.push_back(us_since(t0));
    CU(cudaStreamSynchronize(s));
    async_d.push_back(us_since(t0));
  }
  for (int i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    std::memcpy(pinned, src.data(), bytes);
    CU(cudaMemcpyAsync(dst, pinned, bytes, cudaMemcpyHostToDevice, s));
    pin_r.push_back(us_since(t0));
    CU(cudaStreamSynchronize(s));
    pin_d.push_back(us_since(t0));
  }
  Ferry f;
  ferry_buffer b = f.alloc(bytes);
  rusage ru0{}, ru1{};
  getrusage(RUSAGE_SELF, &ru0);  // the whole client: its receiver thread too
  for (int i = 0; i < n; ++i) {
    ferry_ticket t = 0;
    auto t0 = Clock::now();
    FERRY(ferry_upload(f.c, b, 0, src.data(), bytes, &t));
    fr_r.push_back(us_since(t0));
    FERRY(ferry_wait(f.c, t, -1));
    fr_d.push_back(us_since(t0));
  }
  getrusage(RUSAGE_SELF, &ru1);
  const double csw = static_cast<double>((ru1.ru_nvcsw - ru0.ru_nvcsw) + (ru1.ru_nivcsw - ru0.ru_nivcsw)) / n;
  auto sa = stats(async_r), sf = stats(fr_r);
  g.call_ratio = sf.median / sa.median;
  g.known_vs_pinned = stats(fr_d).median / stats(pin_d).median;
  std::printf("### Idle 1 KiB upload\n\n%d uploads each; median (p10–p90).\n\n", n);
  std::printf("| path | call returns | completion known |\n|---|---|---|\n");
  std::printf("| pageable-sync (async + stream sync) | %s | same |\n", fmt(stats(sync_r), "µs").c_str());
  std::printf("| pageable-async | %s | %s |\n", fmt(sa, "µs").c_str(), fmt(stats(async_d), "µs").c_str());
  std::printf("| pinned-async (memcpy + async) | %s | %s |\n", fmt(stats(pin_r), "µs").c_str(),
              fmt(stats(pin_d), "µs").c_str());
  std::printf("| **ferry** | %s | %s |\n\n", fmt(sf, "µs").c_str(), fmt(stats(fr_d), "µs").c_str());
  std::printf("Client context switches per ferry upload + wait (getrusage, whole process): %.3f.\n\n", csw);
  CU(cudaFreeHost(pinned));
  CU(cudaFree(dst));
}

// ---------------------------------------------------------------- a real program's loop
// Reads the region: a weighted sum of its bytes into *out (256 threads).
__global__ void read_region(const unsigned char* p, unsigned n, unsigned long long* out) {
  unsigned long long acc = 0;
  for (unsigned k = threadIdx.x; k < n; k += blockDim.x) acc += (unsigned long long)p[k] * (k + 1);
  atomicAdd(out, acc);
}

unsigned long long host_sum(const unsigned char* p, unsigned n) {
  unsigned long long acc = 0;
  for (unsigned k = 0; k < n; ++k) acc += (unsigned long long)p[k] * (k + 1);
  return acc;
}

// kernel; 1 KiB upload into ONE reused region; a kernel that reads it
// (verified, every iteration); kernel; the clock runs until the stream and
// ferry's copies are all done.
void ordered_loop() {
  const int n = g_quick ? 50 : 1000;
  const unsigned long long ns = 30'000;
  const unsigned bytes = 1024;
  std::vector<std::vector<unsigned char>> src(n, std::vector<unsigned char>(bytes));
  std::vector<unsigned long long> want(n), got(n);
  unsigned char* region = nullptr;
  unsigned long long* sums = nullptr;
  CU(cudaMalloc(&region, bytes));
  CU(cudaMalloc(&sums, n * sizeof(unsigned long long)));
  // The in-process pinned ring: 16 slots, each reused once its copy is done.
  const int kSlots = 16;
  unsigned char* ring = nullptr;
  CU(cudaMallocHost(&ring, kSlots * bytes));
  std::vector<cudaEvent_t> slot_done(kSlots);
  for (auto& e : slot_done) CU(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  Ferry f;
  // ferry uploads into this context's own allocation, exported to ferryd.
  cudaIpcMemHandle_t ipc{};
  CU(cudaIpcGetMemHandle(&ipc, region));
  ferry_ipc_handle h{};
  h.kind = FERRY_IPC_CUDA;
  h.bytes = bytes;
  h.fd = -1;
  std::memcpy(h.data, &ipc, sizeof h.data);
  ferry_buffer b{};
  FERRY(ferry_buffer_import(f.c, &h, &b));
  const int reg = ferry_cu_register(f.c);
  int round = 0;
  auto loop = [&](const std::function<void(int)>& step) {
    std::vector<double> runs;
    size_t wrong = 0;
    for (int r = 0; r < (g_quick ? 1 : 3); ++r, ++round) {
      for (int i = 0; i < n; ++i) {
        for (unsigned k = 0; k < bytes; ++k) src[i][k] = (unsigned char)(i * 131 + k * 7 + round);
        want[i] = host_sum(src[i].data(), bytes);
      }
      CU(cudaMemsetAsync(sums, 0, n * sizeof(unsigned long long), s));
      CU(cudaStreamSynchronize(s));
      FERRY(ferry_flush(f.c, -1));
      auto t0 = Clock::now();
      for (int i = 0; i < n; ++i) step(i);
      CU(cudaStreamSynchronize(s));
      FERRY(ferry_flush(f.c, -1));
      runs.push_back(us_since(t0) / 1000);
      CU(cudaMemcpy(got.data(), sums, n * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
      for (int i = 0; i < n; ++i) wrong += got[i] != want[i];
    }
    return std::make_pair(stats(runs), wrong);
  };
  auto sync = loop([&](int i) {
    busy<<<1, 1, 0, s>>>(ns);
    CU(cudaMemcpyAsync(region, src[i].data(), bytes, cudaMemcpyHostToDevice, s));
    CU(cudaStreamSynchronize(s));
    read_region<<<1, 256, 0, s>>>(region, bytes, sums + i);
    busy<<<1, 1, 0, s>>>(ns);
  });
  auto pinned = loop([&](int i) {
    busy<<<1, 1, 0, s>>>(ns);
    const int k = i % kSlots;
    CU(cudaEventSynchronize(slot_done[k]));  // the slot's previous copy is done
    std::memcpy(ring + k * bytes, src[i].data(), bytes);
    CU(cudaMemcpyAsync(region, ring + k * bytes, bytes, cudaMemcpyHostToDevice, s));
    CU(cudaEventRecord(slot_done[k], s));
    read_region<<<1, 256, 0, s>>>(region, bytes, sums + i);
    busy<<<1, 1, 0, s>>>(ns);
  });
  std::pair<Stats, size_t> dev{};
  uint64_t value = 0;
  if (reg == 0) {
    dev = loop([&](int i) {
      busy<<<1, 1, 0, s>>>(ns);
      ferry_ticket t = 0;
      // The copy waits for the previous read (it raised `value`); the read waits for the copy.
      if (value == 0) {
        FERRY(ferry_upload(f.c, b, 0, src[i].data(), bytes, &t));
      } else {
        FERRY(ferry_upload_after(f.c, b, 0, src[i].data(), bytes, value, &t));
      }
      FERRY(ferry_cu_stream_wait(f.c, s, t));
      read_region<<<1, 256, 0, s>>>(region, bytes, sums + i);
      FERRY(ferry_cu_stream_signal(f.c, s, ++value));
      busy<<<1, 1, 0, s>>>(ns);
    });
  }
  // Direct: ferry stages, this stream copies (ferry_cu_upload): no ferryd, no
  // wait, the stream's own order puts the copy between the kernels.
  std::pair<Stats, size_t> direct{};
  if (reg == 0) {
    direct = loop([&](int i) {
      busy<<<1, 1, 0, s>>>(ns);
      ferry_ticket t = 0;
      FERRY(ferry_cu_upload(f.c, s, reinterpret_cast<CUdeviceptr>(region), src[i].data(), bytes, &t));
      read_region<<<1, 256, 0, s>>>(region, bytes, sums + i);
      busy<<<1, 1, 0, s>>>(ns);
    });
  }
  auto host = loop([&](int i) {
    busy<<<1, 1, 0, s>>>(ns);
    CU(cudaStreamSynchronize(s));  // the previous read is done
    ferry_ticket t = 0;
    FERRY(ferry_upload(f.c, b, 0, src[i].data(), bytes, &t));
    FERRY(ferry_wait(f.c, t, -1));
    read_region<<<1, 256, 0, s>>>(region, bytes, sums + i);
    busy<<<1, 1, 0, s>>>(ns);
  });
  std::printf("### A real program: kernel + 1 KiB upload into one reused region + a kernel that reads it + "
              "kernel, ×%d\n\n",
              n);
  std::printf("Kernels spin %llu µs on the GPU's timer; the read kernel sums the region, checked after every "
              "run. Loop time until the stream and ferry's copies are all done, median of 3 (p10–p90). "
              "Floor: %.0f ms of kernels.%s\n\n",
              ns / 1000, 2.0 * n * ns / 1e6, g_mps ? " **Under MPS.**" : "");
  std::printf("| path | loop time | wrong |\n|---|---|---|\n");
  std::printf("| pageable-sync (async + stream sync) | %s | %zu |\n", fmt(sync.first, "ms").c_str(), sync.second);
  std::printf("| in-process pinned ring | %s | %zu |\n", fmt(pinned.first, "ms").c_str(), pinned.second);
  if (reg == 0) {
    std::printf("| **ferry, direct (ferry_cu_upload)** | %s | %zu |\n", fmt(direct.first, "ms").c_str(),
                direct.second);
    std::printf("| ferry, device-side waits | %s | %zu |\n", fmt(dev.first, "ms").c_str(), dev.second);
    g.loop_vs_pinned = dev.first.median / pinned.first.median;
    g.loop_wrong = dev.second;
    g.direct_vs_pinned = direct.first.median / pinned.first.median;
    g.direct_wrong = direct.second;
  } else {
    std::printf("| ferry, device-side waits | unavailable: %s | |\n", ferry_strerror(reg));
  }
  std::printf("| ferry, host waits | %s | %zu |\n\n", fmt(host.first, "ms").c_str(), host.second);
  if (reg == 0)
    std::printf("ferry direct: **%.2f×** the in-process pinned ring; device-side waits %.2f×.\n\n", g.direct_vs_pinned,
                g.loop_vs_pinned);
  if (reg == 0) ferry_cu_unregister(f.c);
  for (auto& e : slot_done) CU(cudaEventDestroy(e));
  CU(cudaFreeHost(ring));
  FERRY(ferry_buffer_free(f.c, b));
  CU(cudaFree(sums));
  CU(cudaFree(region));
}

// ---------------------------------------------------------------- behind a 20 ms kernel
// memcpy rate of `threads` threads from pageable memory into pinned memory:
// the bound for any staged upload from pageable memory.
double staging_rate(const char* src, char* dst, size_t n, unsigned threads);

void behind_kernel(unsigned staging_threads) {
  const uint64_t max = g_quick ? (64ull << 20) : (1ull << 30);
  std::printf("### Call-return time with a 20 ms kernel queued ahead\n\n");
  std::printf("The kernel is launched on the stream, then one upload is issued; the time until the call "
              "returns, median of 3. staging: %u threads memcpy the same bytes into pinned memory (a call that "
              "copies its source cannot return sooner). ferry direct appends to the kernel's stream; "
              "ferry_upload goes through ferryd.\n\n",
              staging_threads);
  std::printf("| size | pageable cudaMemcpyAsync | staging memcpy | **ferry direct** | ferry_upload |\n"
              "|---|---|---|---|---|\n");
  std::vector<char> src(max, 3);
  char* pinned = nullptr;
  CU(cudaMallocHost(&pinned, max));
  void* dst = nullptr;
  CU(cudaMalloc(&dst, max));
  Ferry f;
  ferry_buffer b = f.alloc(max);
  const bool direct = ferry_cu_register(f.c) == 0;
  ferry_info info{};
  FERRY(ferry_get_info(f.c, &info));
  const uint64_t staging_bytes = uint64_t{info.slot_count} * info.slot_bytes;
  for (uint64_t n = 1024; n <= max; n *= (n < (4u << 20) ? 64 : 4)) {
    std::vector<double> pg, st, dr, fr;
    for (int r = 0; r < (g_quick ? 1 : 3); ++r) {
      CU(cudaStreamSynchronize(s));
      busy<<<1, 1, 0, s>>>(20'000'000ull);
      auto t0 = Clock::now();
      CU(cudaMemcpyAsync(dst, src.data(), n, cudaMemcpyHostToDevice, s));
      pg.push_back(us_since(t0) / 1000);
      CU(cudaStreamSynchronize(s));
      st.push_back(static_cast<double>(n) / staging_rate(src.data(), pinned, n, staging_threads) / 1e6);
      if (direct) {
        busy<<<1, 1, 0, s>>>(20'000'000ull);
        ferry_ticket t = 0;
        t0 = Clock::now();
        FERRY(ferry_cu_upload(f.c, s, reinterpret_cast<CUdeviceptr>(dst), src.data(), n, &t));
        dr.push_back(us_since(t0) / 1000);
        CU(cudaStreamSynchronize(s));
        FERRY(ferry_wait(f.c, t, -1));
      }
      busy<<<1, 1, 0, s>>>(20'000'000ull);
      ferry_ticket t = 0;
      t0 = Clock::now();
      FERRY(ferry_upload(f.c, b, 0, src.data(), n, &t));
      fr.push_back(us_since(t0) / 1000);
      FERRY(ferry_wait(f.c, t, -1));
      CU(cudaStreamSynchronize(s));
    }
    const double p = stats(pg).median, m = stats(st).median, d = direct ? stats(dr).median : 0, u = stats(fr).median;
    if (n <= (64u << 20)) g.worst_wait_ms = std::max(g.worst_wait_ms, u);
    if (direct && n >= (4u << 20) && n <= (64u << 20))
      g.direct_vs_pageable_4_64 = std::max(g.direct_vs_pageable_4_64, d / p);
    if (direct && n <= staging_bytes) g.direct_over_staging = std::max(g.direct_over_staging, d / m);
    char label[32];
    std::snprintf(label, sizeof label, n >= (1u << 20) ? "%llu MiB" : "%llu KiB",
                  static_cast<unsigned long long>(n >= (1u << 20) ? n >> 20 : n >> 10));
    std::printf("| %s%s | %.3f ms | %.3f ms | %s | %.3f ms |\n", label, n > staging_bytes ? " (> staging)" : "", p, m,
                direct ? (std::to_string(d).substr(0, 6) + " ms").c_str() : "unavailable", u);
  }
  std::printf("\nAn upload larger than the client's staging (%llu MiB here) waits for the stream to free it: behind "
              "the kernel, for the kernel.\n\n",
              static_cast<unsigned long long>(staging_bytes >> 20));
  if (direct) ferry_cu_unregister(f.c);
  FERRY(ferry_buffer_free(f.c, b));
  CU(cudaFreeHost(pinned));
  CU(cudaFree(dst));
}

// ---------------------------------------------------------------- bandwidth
double staging_rate(const char* src, char* dst, size_t n, unsigned threads) {
  auto t0 = Clock::now();
  std::vector<std::thread> ts;
  size_t each = (n / threads + 63) / 64 * 64;
  for (unsigned i = 0; i < threads; ++i)
    ts.emplace_back([=] {
      size_t off = i * each;
      if (off < n) std::memcpy(dst + off, src + off, std::min(each, n - off));
    });
  for (auto& t : ts) t.join();
  return static_cast<double>(n) / (us_since(t0) * 1000);
}

// $FERRY_BENCH_OTHER_CLIENT: another client of the same daemon meanwhile,
// "idle" (connected, never transferring) or "ticking" (a 1-byte upload every
// 100 ms): what a second connection costs the measured one.
class OtherClient {
 public:
  OtherClient() {
    const char* e = std::getenv("FERRY_BENCH_OTHER_CLIENT");
    if (e == nullptr || *e == '\0') return;
    other_ = std::make_unique<Ferry>();
    if (std::strcmp(e, "ticking") != 0) return;
    buf_ = other_->alloc(4096);
    ticker_ = std::thread([this] {
      const char byte = 1;
      while (!stop_) {
        ferry_ticket t = 0;
        FERRY(ferry_upload(other_->c, buf_, 0, &byte, 1, &t));
        FERRY(ferry_wait(other_->c, t, -1));
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
  }
  ~OtherClient() {
    stop_ = true;
    if (ticker_.joinable()) ticker_.join();
  }

 private:
  std::unique_ptr<Ferry> other_;
  ferry_buffer buf_{};
  std::atomic<bool> stop_{false};
  std::thread ticker_;
};

void bandwidth(const std::string& data_dir, unsigned staging_threads) {
  uint64_t max = g_quick ? (16ull << 20) : (1ull << 30);
  if (const char* e = std::getenv("FERRY_BENCH_MAX_BYTES")) max = std::min<uint64_t>(max, std::strtoull(e, nullptr, 10));
  OtherClient other;
  std::vector<char> src(max);
  for (size_t i = 0; i < max; i += 4096) src[i] = static_cast<char>(i >> 12);
  char* pinned = nullptr;
  CU(cudaMallocHost(&pinned, max));
  void* dst = nullptr;
  CU(cudaMalloc(&dst, max));
  Ferry f;
  ferry_buffer b = f.alloc(max);
  const bool direct = ferry_cu_register(f.c) == 0;
  std::ofstream tsv;
  if (!data_dir.empty()) tsv.open(data_dir + "/bandwidth.tsv");
  write_call_done_header(tsv);
  std::printf("### Upload bandwidth against size, pageable source\n\n");
  std::printf("GB/s until the bytes are on the device (1e9 B/s), median of 5 (3 above 64 MiB). "
              "pinned-async copies from memory already pinned: the link itself. "
              "staging: %u threads memcpy pageable → pinned, the bound of any staged upload. "
              "The call columns: how long `cudaMemcpyAsync` from the pageable source and `ferry_upload` "
              "took to return.\n\n",
              staging_threads);
  std::printf("| size | cudaMemcpy pageable | pinned (link) | staging memcpy | **ferry** | ferry / pageable "
              "| ferry direct | direct / ferry "
              "| cudaMemcpyAsync pageable returns | ferry call returns | ferry until done |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (uint64_t n = 4096; n <= max; n *= 4) {
    int reps = n >= (64ull << 20) ? 3 : 5;
    if (g_quick) reps = 1;
    // Each path's repetitions in a row, as a program that uploads in a loop.
    CallDone pageable, async, pin, fer;
    const auto sync = [&] { CU(cudaStreamSynchronize(s)); };
    pageable.time(reps, [&] { CU(cudaMemcpy(dst, src.data(), n, cudaMemcpyHostToDevice)); }, nullptr);
    async.time(reps, [&] { CU(cudaMemcpyAsync(dst, src.data(), n, cudaMemcpyHostToDevice, s)); }, sync);
    pin.time(reps, [&] { CU(cudaMemcpyAsync(dst, pinned, n, cudaMemcpyHostToDevice, s)); }, sync);
    std::vector<double> st;
    for (int r = 0; r < reps; ++r) st.push_back(staging_rate(src.data(), pinned, n, staging_threads));
    ferry_ticket t = 0;
    fer.time(reps, [&] { FERRY(ferry_upload(f.c, b, 0, src.data(), n, &t)); }, [&] { FERRY(ferry_wait(f.c, t, -1)); });
    CallDone dir;
    if (direct)
      dir.time(reps, [&] { FERRY(ferry_cu_upload(f.c, s, reinterpret_cast<CUdeviceptr>(dst), src.data(), n, &t)); },
               [&] { FERRY(ferry_wait(f.c, t, -1)); });
    pageable.write_row(tsv, n, "cudaMemcpy");
    async.write_row(tsv, n, "cudaMemcpyAsync");
    pin.write_row(tsv, n, "pinned-source");
    fer.write_row(tsv, n, "ferry");
    if (direct) dir.write_row(tsv, n, "ferry-direct");
    const double pg = pageable.gbps(n), stg = stats(st).median, fr = fer.gbps(n), dg = direct ? dir.gbps(n) : 0;
    if (direct && n >= (64ull << 20))
      g.direct_vs_ferry_large = g.direct_vs_ferry_large == 0 ? dg / fr : std::min(g.direct_vs_ferry_large, dg / fr);
    if (n >= (64ull << 10)) g.mid_vs_pageable = g.mid_vs_pageable == 0 ? fr / pg : std::min(g.mid_vs_pageable, fr / pg);
    if (n >= (64ull << 20)) {
      double a = fr / pg, c = fr / stg;
      g.large_vs_pageable = g.large_vs_pageable == 0 ? a : std::min(g.large_vs_pageable, a);
      g.large_vs_staging = g.large_vs_staging == 0 ? c : std::min(g.large_vs_staging, c);
    }
    char label[32];
    std::snprintf(label, sizeof label, n >= (1u << 20) ? "%llu MiB" : "%llu KiB",
                  static_cast<unsigned long long>(n >= (1u << 20) ? n >> 20 : n >> 10));
    std::printf("| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.1f µs | %.1f µs | %.1f µs |\n", label, pg,
                pin.gbps(n), stg, fr, fr / pg, dg, fr > 0 ? dg / fr : 0, stats(async.call_us).median,
                stats(fer.call_us).median, stats(fer.done_us).median);
  }
  std::printf("\n");
  if (direct) ferry_cu_unregister(f.c);
  CU(cudaFreeHost(pinned));
  CU(cudaFree(dst));
}

// ---------------------------------------------------------------- producers

std::vector<int> g_procs = {1, 2, 4, 8};

void producers(bool direct) {
  const uint64_t bytes = 4ull << 20;
  const double seconds = g_quick ? 0.3 : 2.0;
  // FERRY_PRODUCER_IN_PLACE=1: each piece is written straight into a
  // reservation of ferry's staging memory (ferry_upload_reserve/commit)
  // instead of being copied there from the producer's own pages.
  const char* ip = std::getenv("FERRY_PRODUCER_IN_PLACE");
  const bool in_place = !direct && ip != nullptr && std::strcmp(ip, "1") == 0;
  if (direct)
    std::printf("### Processes uploading 4 MiB pieces directly at once\n\nEach process has a CUDA context of its "
                "own and uploads 4 MiB from pageable memory with ferry_cu_upload on a stream of its own for %.1f s "
                "(ferry stages, its stream copies); the clock stops when its stream is done.\n\n",
                seconds);
  else if (in_place)
    std::printf("### Producer processes uploading 4 MiB pieces at once\n\n"
                "Each process (no CUDA context of its own) writes 4 MiB pieces straight into ferry's staging memory "
                "(ferry_upload_reserve, memset, ferry_upload_commit) for %.1f s.\n\n", seconds);
  else
    std::printf("### Producer processes uploading 4 MiB pieces at once\n\n"
                "Each process (no CUDA context of its own) uploads 4 MiB from pageable memory for %.1f s.\n\n", seconds);
  std::printf("| processes | aggregate GB/s | fairness | per process GB/s |\n|---|---|---|---|\n");
  for (int procs : g_procs) {
    int go[2], res[2];
    if (pipe(go) != 0 || pipe(res) != 0) std::exit(1);
    std::vector<pid_t> kids;
    for (int p = 0; p < procs; ++p) {
      pid_t pid = fork();
      if (pid == 0) {
        close(go[1]);
        Ferry f;
        ferry_buffer b = direct ? ferry_buffer{} : f.alloc(bytes);
        std::vector<char> src(bytes, 4);
        cudaStream_t own = nullptr;
        void* dst = nullptr;
        if (direct) {
          CU(cudaSetDevice(0));
          CU(cudaStreamCreate(&own));
          CU(cudaMalloc(&dst, bytes));
          FERRY(ferry_cu_register(f.c));
        }
        char c;
        if (read(go[0], &c, 1) != 1) _exit(1);
        uint64_t done = 0;
        auto t0 = Clock::now();
        auto end = t0 + std::chrono::duration<double>(seconds);
        for (uint64_t i = 0; Clock::now() < end; ++i) {
          if (direct) {
            FERRY(ferry_cu_upload(f.c, own, reinterpret_cast<CUdeviceptr>(dst), src.data(), bytes, nullptr));
          } else if (in_place) {
            ferry_reservation r{};
            FERRY(ferry_upload_reserve(f.c, bytes, &r));
            std::memset(r.data, static_cast<int>(i & 0xff), bytes);
            FERRY(ferry_upload_commit(f.c, &r, b, 0, nullptr));
          } else {
            FERRY(ferry_upload(f.c, b, 0, src.data(), bytes, nullptr));
          }
          done += bytes;
        }
        if (direct) CU(cudaStreamSynchronize(own));
        FERRY(ferry_flush(f.c, -1));
        double rate = static_cast<double>(done) / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9;
        if (write(res[1], &rate, sizeof rate) != sizeof rate) _exit(1);
        _exit(0);
      }
      kids.push_back(pid);
    }
    close(go[0]);
    close(res[1]);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    std::vector<char> start(procs, 'g');
    if (write(go[1], start.data(), start.size()) != static_cast<ssize_t>(start.size())) std::exit(1);
    std::vector<double> rates;
    double r;
    while (read(res[0], &r, sizeof r) == sizeof r) rates.push_back(r);
    for (pid_t k : kids) waitpid(k, nullptr, 0);
    close(go[1]);
    close(res[0]);
    double agg = 0;
    std::string each;
    for (double x : rates) {
      agg += x;
      char b[16];
      std::snprintf(b, sizeof b, "%s%.1f", each.empty() ? "" : " ", x);
      each += b;
    }
    std::printf("| %d | %.2f | %.3f | %s |\n", procs, agg, jain(rates), each.c_str());
  }
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::string data;
  bool order_only = false;  // the idle call, the ordered loop and the 30 ms kernel only
  bool bandwidth_only = false;
  bool producers_only = false;  // no CUDA context at all: for one run per GPU at once
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") g_quick = true;
    else if (a == "--socket" && i + 1 < argc) g_socket = argv[++i];
    else if (a == "--data" && i + 1 < argc) data = argv[++i];
    else if (a == "--mps") g_mps = true;  // only labels the output: the caller started MPS
    else if (a == "--order-only") order_only = true;
    else if (a == "--bandwidth-only") bandwidth_only = true;
    else if (a == "--producers-only") producers_only = true;
    else if (a == "--procs" && i + 1 < argc) {
      g_procs.clear();
      for (const char* p = argv[++i]; *p != '\0';) {
        g_procs.push_back(std::atoi(p));
        while (*p != '\0' && *p != ',') ++p;
        if (*p == ',') ++p;
      }
    }
    else {
      std::fprintf(stderr, "usage: cuda_bench --socket PATH [--quick] [--data DIR] [--mps] [--order-only | --bandwidth-only |\n"
                           "                  --producers-only [--procs 1,2,4,8]]\n");
      return 2;
    }
  }
  if (g_socket.empty()) {
    std::fprintf(stderr, "cuda_bench: --socket is required (a ferryd --backend cuda)\n");
    return 2;
  }
  // Producers first: they fork, and a child must not inherit a CUDA context.
  if (!order_only && !bandwidth_only) {
    producers(false);
    producers(true);
  }
  if (producers_only) return 0;
  cudaDeviceProp prop{};
  CU(cudaGetDeviceProperties(&prop, 0));
  CU(cudaStreamCreate(&s));
  unsigned threads = 8;
  if (const char* e = std::getenv("FERRY_STAGING_THREADS")) threads = static_cast<unsigned>(std::atoi(e));
  std::printf("GPU: %s; %u host cores; libferry staging threads: %u.\n\n", prop.name,
              std::thread::hardware_concurrency(), threads);
  if (!bandwidth_only) {
    idle_small();
    ordered_loop();
    behind_kernel(threads);
  }
  if (!order_only) bandwidth(data, threads);
  // Only the goals this run measured (--order-only and --bandwidth-only measure some).
  std::printf("### Goals\n\n| goal | measured | |\n|---|---|---|\n");
  auto mark = [](bool ok) { return ok ? "met" : "**missed**"; };
  if (!bandwidth_only) {
    std::printf("| idle 1 KiB call ≤ 0.5× a pageable cudaMemcpyAsync call | %.2f× | %s |\n", g.call_ratio,
                mark(g.call_ratio <= 0.5));
    std::printf("| idle 1 KiB completion known ≤ 2× pinned cudaMemcpyAsync + sync | %.2f× | %s |\n",
                g.known_vs_pinned, mark(g.known_vs_pinned <= 2));
  }
  if (g.loop_wrong != SIZE_MAX) {
    std::printf("| reused-region loop correct (device-side waits) | %zu wrong | %s |\n", g.loop_wrong,
                mark(g.loop_wrong == 0));
    std::printf("| that loop ≤ 1.1× the in-process pinned ring%s | %.2f× | %s |\n", g_mps ? " (MPS)" : "",
                g.loop_vs_pinned, mark(g.loop_vs_pinned <= 1.1));
  }
  if (g.direct_wrong != SIZE_MAX) {
    std::printf("| reused-region loop correct (direct uploads) | %zu wrong | %s |\n", g.direct_wrong,
                mark(g.direct_wrong == 0));
    std::printf("| that loop ≤ 1.1× the in-process pinned ring%s | %.2f× | %s |\n", g_mps ? " (MPS)" : "",
                g.direct_vs_pinned, mark(g.direct_vs_pinned <= 1.1));
  }
  if (g.direct_vs_pageable_4_64 > 0)
    std::printf("| direct call behind a 20 ms kernel, 4–64 MiB: < 0.1× pageable cudaMemcpyAsync | %.3f× (worst size) "
                "| %s |\n",
                g.direct_vs_pageable_4_64, mark(g.direct_vs_pageable_4_64 < 0.1));
  if (g.direct_over_staging > 0)
    std::printf("| direct call behind the kernel ÷ the staging memcpy, sizes within staging | %.2f× (worst size) | "
                "(as soon as staged) |\n",
                g.direct_over_staging);
  if (g.direct_vs_ferry_large > 0)
    std::printf("| direct bandwidth ≥ 0.9× daemon-appended, 64 MiB–1 GiB | %.2f× (worst size) | %s |\n",
                g.direct_vs_ferry_large, mark(g.direct_vs_ferry_large >= 0.9));
  if (!bandwidth_only)
    std::printf("| ferry_upload never waits for queued kernels (20 ms kernel ahead) | worst call %.2f ms | %s |\n",
                g.worst_wait_ms, mark(g.worst_wait_ms < 20));
  if (g.mid_vs_pageable > 0)
    std::printf("| pageable upload from 64 KiB up: ≥ pageable cudaMemcpy | %.2f× (worst size) | %s |\n",
                g.mid_vs_pageable, mark(g.mid_vs_pageable >= 1));
  if (g.large_vs_pageable > 0) {
    std::printf("| pageable upload ≥ 64 MiB: ≥ 3× pageable cudaMemcpy | %.2f× (worst size) | %s |\n",
                g.large_vs_pageable, mark(g.large_vs_pageable >= 3));
    std::printf("| pageable upload ≥ 64 MiB: ≥ 90%% of the staging memcpy rate | %.0f%% (worst size) | %s |\n",
                100 * g.large_vs_staging, mark(g.large_vs_staging >= 0.9));
  }
  std::printf("\n");
  return 0;
}
