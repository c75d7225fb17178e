// SPDX-License-Identifier: MIT
// An unmodified CUDA program, as ferry-run's checks on a GPU run it: it knows
// nothing of ferry. For each size it uploads a pageable buffer behind a
// kernel of `--busy-ms` (20 by default), overwrites the source as soon as the
// call returns, and says what the device received and how long the call took:
//   SIZE original|overwritten|mixed call_ms=X rc=N
// CUDA's own contract makes "original" the only right answer for every
// mode below; ferry-run must keep it, and be faster where it can.
// Modes (--mode):
//   async    cudaMemcpyAsync on a stream of its own
//   legacy   cudaMemcpyAsync on stream 0 (the legacy default stream, or the
//            thread's own where built with --default-stream per-thread)
//   sync     cudaMemcpy (synchronous: after the kernel)
//   driver   cuMemcpyHtoDAsync on a stream of its own, through the driver API
//   graph    the copy captured into a graph on its stream, the graph launched
//   pinned   cudaMemcpyAsync from cudaMallocHost memory
// Built three ways (bench/CMakeLists.txt): the runtime linked statically (nvcc's
// default: its driver calls come through cuGetProcAddress), shared, and with
// per-thread default streams.
#include <cuda.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

__global__ void busy(long long cycles) {
  const long long end = clock64() + cycles;
  while (clock64() < end) {
  }
}

static unsigned char pattern(size_t i, int second) { return static_cast<unsigned char>(i * 131 + (second ? 77 : 5) + (i >> 13)); }

int main(int argc, char** argv) {
  std::string mode = "async";
  double busy_ms = 20;
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; ++i) {
    if (std::strcmp(argv[i], "--mode") == 0 && i + 1 < argc) {
      mode = argv[++i];
    } else if (std::strcmp(argv[i], "--busy-ms") == 0 && i + 1 < argc) {
      busy_ms = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: run_cuda_check [--mode M] [--busy-ms MS] SIZE...\n");
      return 2;
    }
  }
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  const long long cycles = static_cast<long long>(busy_ms * clock_khz);
  cudaStream_t s = nullptr;
  if (mode != "legacy" && mode != "sync") cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cuInit(0);
  int failures = 0;
  for (; i < argc; ++i) {
    const size_t n = std::strtoull(argv[i], nullptr, 10);
    unsigned char* src = nullptr;
    if (mode == "pinned") {
      cudaMallocHost(&src, n);
    } else {
      src = static_cast<unsigned char*>(std::malloc(n));
    }
    std::vector<unsigned char> back(n);
    void* dst = nullptr;
    cudaMalloc(&dst, n);
    for (size_t k = 0; k < n; ++k) src[k] = pattern(k, 0);
    cudaMemset(dst, 0, n);
    cudaDeviceSynchronize();
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    busy<<<1, 1, 0, s>>>(cycles);
    const auto t0 = std::chrono::steady_clock::now();
    int rc = 0;
    if (mode == "async" || mode == "legacy" || mode == "pinned") {
      rc = cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s);
    } else if (mode == "sync") {
      rc = cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice);
    } else if (mode == "driver") {
      rc = cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(dst), src, n, reinterpret_cast<CUstream>(s));
    } else if (mode == "graph") {
      rc = cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed);
      if (rc == 0) rc = cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s);
      const int end = cudaStreamEndCapture(s, &graph);
      if (rc == 0) rc = end;
      if (rc == 0) rc = cudaGraphInstantiate(&exec, graph, 0);
      if (rc == 0) rc = cudaGraphLaunch(exec, s);
    } else {
      std::fprintf(stderr, "run_cuda_check: unknown mode %s\n", mode.c_str());
      return 2;
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    for (size_t k = 0; k < n; ++k) src[k] = pattern(k, 1);
    if (cudaDeviceSynchronize() != cudaSuccess) rc = rc != 0 ? rc : -1;
    cudaMemcpy(back.data(), dst, n, cudaMemcpyDeviceToHost);
    size_t first = 0, second = 0;
    for (size_t k = 0; k < n; ++k) {
      first += back[k] == pattern(k, 0);
      second += back[k] == pattern(k, 1);
    }
    const char* what = first == n ? "original" : second == n ? "overwritten" : "mixed";
    std::printf("%zu %s call_ms=%.3f rc=%d\n", n, what, ms, rc);
    std::fflush(stdout);
    failures += rc != 0;
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaFree(dst);
    if (mode == "pinned") {
      cudaFreeHost(src);
    } else {
      std::free(src);
    }
  }
  return failures != 0 ? 1 : 0;
}
