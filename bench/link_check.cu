// SPDX-License-Identifier: MIT
// link_check: what the host can move to several GPUs at once with no ferry
// in the way. One thread per GPU copies from its own pinned (page-locked)
// buffer to device memory with cudaMemcpyAsync for a few seconds, all GPUs
// at the same time; prints each GPU's GB/s and the sum. Run it with one GPU,
// then with several: the ratio of the sums is the most any upload path,
// ferry's included, can gain from the extra GPUs on this host.
// --writers N: N more threads write (memset) 64 MiB buffers of their own
// meanwhile, as producers building their data do, and their GB/s is printed
// too: what the host's memory gives both at once.
//   usage: link_check [--seconds S] [--bytes N] [--writers N] GPU...
#include <cuda_runtime.h>

#include <cstring>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "link_check: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2.0;
  size_t bytes = 64u << 20;
  std::vector<int> gpus;
  int writers = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (a == "--bytes" && i + 1 < argc) {
      bytes = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--writers" && i + 1 < argc) {
      writers = std::atoi(argv[++i]);
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: link_check [--seconds S] [--bytes N] [--writers N] GPU...\n");
      return 0;
    } else {
      gpus.push_back(std::atoi(a.c_str()));
    }
  }
  if (gpus.empty() || seconds <= 0 || bytes == 0 || writers < 0) {
    std::fprintf(stderr, "usage: link_check [--seconds S] [--bytes N] [--writers N] GPU...\n");
    return 2;
  }
  std::vector<double> rate(gpus.size(), 0);
  std::atomic<int> ready{0}, failed{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> ts;
  for (size_t k = 0; k < gpus.size(); ++k) {
    ts.emplace_back([&, k] {
      void* host = nullptr;
      void* dev = nullptr;
      cudaStream_t s{};
      if (!ok(cudaSetDevice(gpus[k]), "cudaSetDevice") || !ok(cudaMallocHost(&host, bytes), "cudaMallocHost") ||
          !ok(cudaMalloc(&dev, bytes), "cudaMalloc") || !ok(cudaStreamCreate(&s), "cudaStreamCreate")) {
        ++failed;
        ++ready;
        return;
      }
      ok(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice), "warm-up copy");
      ++ready;
      while (!go.load()) std::this_thread::yield();
      const auto t0 = std::chrono::steady_clock::now();
      const auto end = t0 + std::chrono::duration<double>(seconds);
      size_t moved = 0;
      while (std::chrono::steady_clock::now() < end) {
        for (int i = 0; i < 4; ++i) ok(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s), "copy");
        ok(cudaStreamSynchronize(s), "sync");
        moved += 4 * bytes;
      }
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      rate[k] = static_cast<double>(moved) / dt / 1e9;
      cudaFree(dev);
      cudaFreeHost(host);
      cudaStreamDestroy(s);
    });
  }
  std::vector<double> wrote(static_cast<size_t>(writers), 0);
  for (int w = 0; w < writers; ++w) {
    ts.emplace_back([&, w] {
      std::vector<char> buf(64u << 20, 1);
      ++ready;
      while (!go.load()) std::this_thread::yield();
      const auto t0 = std::chrono::steady_clock::now();
      const auto end = t0 + std::chrono::duration<double>(seconds);
      size_t n = 0;
      for (int v = 0; std::chrono::steady_clock::now() < end; ++v, n += buf.size()) std::memset(buf.data(), v, buf.size());
      wrote[static_cast<size_t>(w)] =
          static_cast<double>(n) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 1e9;
    });
  }
  while (ready.load() < static_cast<int>(gpus.size()) + writers) std::this_thread::yield();
  go = true;
  for (auto& t : ts) t.join();
  if (failed.load() != 0) return 1;
  double sum = 0;
  std::printf("pinned host -> device, %zu MiB copies, %.1f s, GPUs", bytes >> 20, seconds);
  for (int g : gpus) std::printf(" %d", g);
  std::printf(":");
  for (size_t k = 0; k < gpus.size(); ++k) {
    std::printf(" %.1f", rate[k]);
    sum += rate[k];
  }
  std::printf(" GB/s; together %.1f GB/s", sum);
  if (writers > 0) {
    double w = 0;
    for (double x : wrote) w += x;
    std::printf("; %d writers beside: %.1f GB/s", writers, w);
  }
  std::printf("\n");
  return 0;
}
