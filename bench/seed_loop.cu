// SPDX-License-Identifier: MIT
// The runtime's loop that started ferry (oneAPI.jl #719), written as a
// CUDA program would be, unmodified: a kernel, an upload of BYTES from
// pageable memory with cudaMemcpyAsync, a kernel that reads the uploaded
// bytes, ITER times on one stream, the host buffer rewritten for each
// upload. The consumer sums what it read; the sum is checked against the
// host's. Prints: seed_loop bytes=B iters=N ms=T ok|WRONG
// usage: seed_loop [BYTES [ITER [KERNEL_US]]]
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void work(long long cycles) {
  const long long end = clock64() + cycles;
  while (clock64() < end) {
  }
}

__global__ void consume(const unsigned char* p, size_t n, unsigned long long* sum) {
  unsigned long long s = 0;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) s += p[i];
  atomicAdd(sum, s);
}

int main(int argc, char** argv) {
  const size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1024;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 1000;
  const double kernel_us = argc > 3 ? std::atof(argv[3]) : 20;
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  const long long cycles = static_cast<long long>(kernel_us * clock_khz / 1000);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  unsigned char* dst = nullptr;
  unsigned long long* sum = nullptr;
  cudaMalloc(&dst, bytes);
  cudaMalloc(&sum, sizeof *sum);
  cudaMemset(sum, 0, sizeof *sum);
  std::vector<unsigned char> host(bytes);
  unsigned long long expect = 0;
  // One round first: the context, the kernels' first launches.
  work<<<1, 1, 0, s>>>(cycles);
  cudaStreamSynchronize(s);
  const auto t0 = std::chrono::steady_clock::now();
  for (int it = 0; it < iters; ++it) {
    for (size_t i = 0; i < bytes; ++i) host[i] = static_cast<unsigned char>(i * 7 + it);
    for (size_t i = 0; i < bytes; ++i) expect += host[i];
    work<<<1, 1, 0, s>>>(cycles);
    cudaMemcpyAsync(dst, host.data(), bytes, cudaMemcpyHostToDevice, s);
    consume<<<1, 256, 0, s>>>(dst, bytes, sum);
  }
  cudaStreamSynchronize(s);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  unsigned long long got = 0;
  cudaMemcpy(&got, sum, sizeof got, cudaMemcpyDeviceToHost);
  std::printf("seed_loop bytes=%zu iters=%d ms=%.2f %s\n", bytes, iters, ms, got == expect ? "ok" : "WRONG");
  return got == expect ? 0 : 1;
}
