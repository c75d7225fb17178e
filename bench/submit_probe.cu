// SPDX-License-Identifier: MIT
// submit_probe: where the time of a medium upload goes on a CUDA device, with
// no ferry in the way. One process plays both sides of ferry's hot path: the
// "client" (main thread) copies a pageable source into a registered staging
// buffer piece by piece and publishes each piece in a shared word; the
// "poller" (a second thread, spinning, as ferryd's) submits each piece as
// ferry's CUDA backend does (cuMemcpyAsync, cuStreamWriteValue64 of a timeline
// word, cuEventRecord) and reaps events meanwhile; the client then spins on
// the timeline word. Variants change one thing each: the pieces, whether a
// piece gets a timeline write and an event, whether the poller queries events.
// Prints per variant the median of the runs: the time until the client sees
// the last value, until the call would return, and the poller's CPU time
// inside each CUDA call, beside the driver's own paths (pageable cudaMemcpy,
// pinned cudaMemcpyAsync + sync) measured in the same run.
//   usage: submit_probe [--bytes N] [--runs R]
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
double us(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); }

void check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const char* s = nullptr;
  cuGetErrorString(r, &s);
  std::fprintf(stderr, "submit_probe: %s: %s\n", what, s != nullptr ? s : "?");
  std::exit(1);
}
void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "submit_probe: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Variant {
  const char* name;
  std::vector<uint64_t> pieces;  // bytes of each piece, in order
  bool write_each = true;        // a timeline write after every piece (else after the last only)
  bool event_each = true;        // an event after every piece (else after the last only)
  bool query = true;             // the poller queries its oldest event while it spins
  bool malloc_host = false;      // staging in cudaMallocHost memory, not registered memory
  int kernel_blocks = 0;         // the copy by a kernel of this many blocks reading mapped host memory
  int window = 0;                // staged round a window of this many pieces, each reused once its copy is seen done
};

struct Piece {
  uint64_t off = 0, len = 0;
  bool write = false, event = false;
  uint64_t value = 0;
  char* base = nullptr;
  int blocks = 0;
  uint64_t soff = 0;  // where in the staging buffer
  uint64_t wait = 0;  // the timeline value to see before staging it (its bytes' last user done)
};

// Shared between the client and the poller, which lives as long as the
// program (a new thread's first CUDA calls are slower than a steady one's).
struct Shared {
  std::vector<Piece> plan;             // every piece of every run, in order
  std::atomic<uint64_t> published{0};  // pieces of `plan` the client has staged
  std::atomic<bool> stop{false};
  std::atomic<bool> query{true};
  // The poller's time in each kind of call, summed, and the counts.
  std::atomic<double> copy_us{0}, write_us{0}, event_us{0};
  std::atomic<int> copies{0}, writes{0}, events{0};
};

// A copy by the SMs: each thread moves 16-byte words from host memory the
// device reads through its mapping, strided over the whole grid.
__global__ void copy_kernel(const int4* __restrict__ src, int4* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    dst[i] = src[i];
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t bytes = 256 << 10;
  int runs = 41;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--bytes" && i + 1 < argc) bytes = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--runs" && i + 1 < argc) runs = std::atoi(argv[++i]);
    else {
      std::printf("usage: submit_probe [--bytes N] [--runs R]\n");
      return a == "-h" || a == "--help" ? 0 : 2;
    }
  }
  check(cuInit(0), "cuInit");
  check(cudaSetDevice(0), "cudaSetDevice");
  check(cudaFree(nullptr), "context");
  CUcontext ctx{};
  check(cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");

  const uint64_t staging_bytes = 64ull << 20;
  char* staging = static_cast<char*>(std::aligned_alloc(4096, staging_bytes));
  std::memset(staging, 0, staging_bytes);
  check(cuMemHostRegister(staging, staging_bytes, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP),
        "cuMemHostRegister");
  auto* word = reinterpret_cast<volatile uint64_t*>(staging + staging_bytes - 64);
  CUdeviceptr word_dev = 0;
  check(cuMemHostGetDevicePointer(&word_dev, const_cast<uint64_t*>(word), 0), "cuMemHostGetDevicePointer");
  CUdeviceptr staging_mapped = 0;
  check(cuMemHostGetDevicePointer(&staging_mapped, staging, 0), "cuMemHostGetDevicePointer");
  char* const staging_dev = reinterpret_cast<char*>(staging_mapped);
  std::vector<char> src(std::max<uint64_t>(bytes, 1 << 20));
  for (size_t i = 0; i < src.size(); i += 64) src[i] = static_cast<char>(i);
  void* dst = nullptr;
  check(cudaMalloc(&dst, std::max<uint64_t>(bytes, 1 << 20)), "cudaMalloc");
  char* pinned = nullptr;
  check(cudaMallocHost(&pinned, bytes), "cudaMallocHost");
  CUstream stream{};
  check(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  std::vector<CUevent> events(64);
  for (auto& e : events) check(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC), "cuEventCreate");

  // The driver's own paths.
  std::vector<double> pageable, pinned_sync, pinned_4k;
  cudaStream_t rs{};
  check(cudaStreamCreateWithFlags(&rs, cudaStreamNonBlocking), "cudaStreamCreate");
  for (int r = 0; r < runs + 3; ++r) {
    auto t0 = Clock::now();
    check(cudaMemcpy(dst, src.data(), bytes, cudaMemcpyHostToDevice), "pageable cudaMemcpy");
    auto t1 = Clock::now();
    check(cudaMemcpyAsync(dst, pinned, bytes, cudaMemcpyHostToDevice, rs), "pinned copy");
    check(cudaStreamSynchronize(rs), "sync");
    auto t2 = Clock::now();
    check(cudaMemcpyAsync(dst, pinned, 4096, cudaMemcpyHostToDevice, rs), "pinned 4 KiB");
    check(cudaStreamSynchronize(rs), "sync");
    auto t3 = Clock::now();
    if (r < 3) continue;
    pageable.push_back(us(t0, t1));
    pinned_sync.push_back(us(t1, t2));
    pinned_4k.push_back(us(t2, t3));
  }
  // The same pinned bytes cut over several streams (copy engines), all synced.
  cudaStream_t ms[4];
  for (auto& x : ms) check(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking), "cudaStreamCreate");
  for (int k : {1, 2, 4}) {
    std::vector<double> one, many;
    for (int r = 0; r < runs + 3; ++r) {
      const uint64_t part = bytes / k;
      auto t0 = Clock::now();
      for (int i = 0; i < k; ++i)
        check(cudaMemcpyAsync(static_cast<char*>(dst) + i * part, pinned + i * part, part, cudaMemcpyHostToDevice, rs),
              "split copy");
      check(cudaStreamSynchronize(rs), "sync");
      auto t1 = Clock::now();
      for (int i = 0; i < k; ++i)
        check(cudaMemcpyAsync(static_cast<char*>(dst) + i * part, pinned + i * part, part, cudaMemcpyHostToDevice, ms[i]),
              "split copy");
      for (int i = 0; i < k; ++i) check(cudaStreamSynchronize(ms[i]), "sync");
      auto t2 = Clock::now();
      if (r < 3) continue;
      one.push_back(us(t0, t1));
      many.push_back(us(t1, t2));
    }
    std::printf("pinned in %d copies: one stream %.1f us, %d streams %.1f us\n", k, median(one), k, median(many));
  }
  std::vector<double> memcpy_us;
  for (int r = 0; r < runs; ++r) {
    auto t0 = Clock::now();
    std::memcpy(staging, src.data(), bytes);
    memcpy_us.push_back(us(t0, Clock::now()));
  }
  std::printf("bytes %llu, %d runs, medians\n", static_cast<unsigned long long>(bytes), runs);
  std::printf("pageable cudaMemcpy %.1f us; pinned cudaMemcpyAsync+sync %.1f us; pinned 4 KiB+sync %.1f us; "
              "memcpy into staging %.1f us\n\n",
              median(pageable), median(pinned_sync), median(pinned_4k), median(memcpy_us));

  const uint64_t q = bytes / 4, h = bytes / 2;
  auto split = [&](uint64_t piece) { return std::vector<uint64_t>(std::max<uint64_t>(1, bytes / piece), std::min(piece, bytes)); };
  std::vector<Variant> variants = {
      {"one piece", {bytes}},
      {"lead quarter + rest (ferry now)", {q, bytes - q}},
      {"lead quarter + rest, no event on the lead", {q, bytes - q}, true, false},
      {"lead quarter + rest, no write on the lead", {q, bytes - q}, false, true},
      {"lead quarter + rest, neither on the lead", {q, bytes - q}, false, false},
      {"lead quarter + rest, poller never queries", {q, bytes - q}, true, true, false},
      {"lead quarter + rest, cudaMallocHost staging", {q, bytes - q}, true, true, true, true},
      {"one piece, cudaMallocHost staging", {bytes}, true, true, true, true},
      {"one piece, kernel of 66 blocks", {bytes}, true, true, true, false, 66},
      {"one piece, kernel of 132 blocks", {bytes}, true, true, true, false, 132},
      {"one piece, kernel of 264 blocks", {bytes}, true, true, true, false, 264},
      {"one piece, kernel of 528 blocks", {bytes}, true, true, true, false, 528},
      {"lead quarter + rest, kernel of 132 blocks", {q, bytes - q}, true, true, true, false, 132},
      {"halves, kernel of 264 blocks", {h, bytes - h}, true, true, true, false, 264},
      {"halves", {h, bytes - h}},
      {"quarters", {q, q, q, bytes - 3 * q}},
      {"quarters, write+event on the last only", {q, q, q, bytes - 3 * q}, false, false},
      {"eighths, write+event on the last only",
       {bytes / 8, bytes / 8, bytes / 8, bytes / 8, bytes / 8, bytes / 8, bytes / 8, bytes - 7 * (bytes / 8)}, false,
       false},
      {"4 KiB alone", {4096}},
      {"256 KiB pieces, fresh bytes", split(256 << 10)},
      {"256 KiB pieces round 2", split(256 << 10), true, true, true, false, 0, 2},
      {"256 KiB pieces round 4", split(256 << 10), true, true, true, false, 0, 4},
      {"256 KiB pieces round 8", split(256 << 10), true, true, true, false, 0, 8},
      {"128 KiB pieces round 4", split(128 << 10), true, true, true, false, 0, 4},
      {"128 KiB pieces round 8", split(128 << 10), true, true, true, false, 0, 8},
      {"512 KiB pieces round 2", split(512 << 10), true, true, true, false, 0, 2},
      {"512 KiB pieces round 4", split(512 << 10), true, true, true, false, 0, 4},
  };
  std::printf("| variant | until seen (us) | call returns (us) | last publish -> seen (us) | poller: copy / write / event (us per call) |\n"
              "|---|---|---|---|---|\n");
  Shared sh;
  size_t total = 0;
  for (const Variant& v : variants) total += v.pieces.size() * (runs + 3);
  sh.plan.resize(total);
  std::atomic<bool> ready{false};
  std::thread poller([&] {
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    ready = true;
    uint64_t next = 0, ev_next = 0, ev_oldest = 0;
    while (!sh.stop.load(std::memory_order_relaxed)) {
      if (next < sh.published.load(std::memory_order_acquire)) {
        const Piece& p = sh.plan[next++];
        auto a = Clock::now();
        if (p.blocks != 0) {
          copy_kernel<<<p.blocks, 256, 0, reinterpret_cast<cudaStream_t>(stream)>>>(
              reinterpret_cast<const int4*>(staging_dev + p.soff), reinterpret_cast<int4*>(static_cast<char*>(dst) + p.off),
              p.len / 16);
          check(cudaGetLastError(), "copy_kernel");
        } else {
          check(cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(dst) + p.off,
                              reinterpret_cast<CUdeviceptr>(p.base + p.soff), p.len, stream),
                "cuMemcpyAsync");
        }
        auto b = Clock::now();
        sh.copy_us.store(sh.copy_us.load() + us(a, b));
        ++sh.copies;
        if (p.write) {
          check(cuStreamWriteValue64(stream, word_dev, p.value, 0), "cuStreamWriteValue64");
          auto c = Clock::now();
          sh.write_us.store(sh.write_us.load() + us(b, c));
          ++sh.writes;
          b = c;
        }
        if (p.event) {
          check(cuEventRecord(events[ev_next++ % events.size()], stream), "cuEventRecord");
          sh.event_us.store(sh.event_us.load() + us(b, Clock::now()));
          ++sh.events;
        }
        continue;
      }
      if (sh.query.load(std::memory_order_relaxed) && ev_oldest < ev_next &&
          cuEventQuery(events[ev_oldest % events.size()]) == CUDA_SUCCESS)
        ++ev_oldest;
    }
    check(cuStreamSynchronize(stream), "cuStreamSynchronize");
  });
  while (!ready) std::this_thread::yield();
  uint64_t value = 0, planned = 0;
  for (const Variant& v : variants) {
    std::vector<double> seen, ret, tail, cp, wr, ev;
    sh.query = v.query;
    for (int r = 0; r < runs + 3; ++r) {
      const uint64_t first = planned;
      uint64_t off = 0;
      for (size_t i = 0; i < v.pieces.size(); ++i) {
        const bool last = i + 1 == v.pieces.size();
        Piece p{off, v.pieces[i], last || v.write_each, last || v.event_each, 0, v.malloc_host ? pinned : staging, v.kernel_blocks, off};
        if (p.write) p.value = ++value;
        if (v.window != 0) {
          p.soff = (i % v.window) * v.pieces[0];
          if (i >= static_cast<size_t>(v.window)) p.wait = sh.plan[planned - v.window].value;
        }
        sh.plan[planned++] = p;
        off += v.pieces[i];
      }
      const uint64_t target = value;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      sh.copy_us = sh.write_us = sh.event_us = 0;
      sh.copies = sh.writes = sh.events = 0;
      const auto t0 = Clock::now();
      Clock::time_point last_pub;
      for (uint64_t k = first; k < planned; ++k) {
        const Piece& p = sh.plan[k];
        while (*word < p.wait) {
        }
        std::memcpy(p.base + p.soff, src.data() + p.off, p.len);
        last_pub = Clock::now();
        sh.published.store(k + 1, std::memory_order_release);
      }
      const auto t1 = Clock::now();
      while (*word < target) {
      }
      const auto t2 = Clock::now();
      if (r < 3) continue;
      seen.push_back(us(t0, t2));
      ret.push_back(us(t0, t1));
      tail.push_back(us(last_pub, t2));
      cp.push_back(sh.copy_us / std::max(1, sh.copies.load()));
      wr.push_back(sh.writes != 0 ? sh.write_us / sh.writes : 0);
      ev.push_back(sh.events != 0 ? sh.event_us / sh.events : 0);
    }
    std::printf("| %s | %.1f | %.1f | %.1f | %.2f / %.2f / %.2f |\n", v.name, median(seen), median(ret), median(tail),
                median(cp), median(wr), median(ev));
  }
  sh.stop = true;
  poller.join();
  return 0;
}
