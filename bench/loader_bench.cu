// SPDX-License-Identifier: MIT
// loader_bench: the data-loader pattern users run today against ferry, on a
// real NVIDIA GPU. N worker processes (no GPU context) produce batches; one
// training process consumes them in order with a kernel that reads every
// byte and counts the words that are not what batch b must hold.
//
//   (a) pinned: worker → its batch → shared memory (copy 1); the trainer's
//       pin-memory thread → page-locked buffer (copy 2); cudaMemcpyAsync and
//       the kernel on one stream. PyTorch's DataLoader(pin_memory=True), in C.
//   (b) ferry:  worker → its batch → ferry_upload into a device buffer the
//       trainer granted (one copy, into ferryd's pinned slot), ferry_wait;
//       the trainer's kernel reads the buffer through CUDA IPC.
//
// Same batches, same kernel, same slot hand-off between processes (K = 2 per
// worker). The clock starts when every worker is connected and ready, and
// stops when the last batch's kernel finished. Host CPU per batch counts the
// trainer, the workers and ferryd (for (b)).
//
//   loader_bench --socket S --ferryd-pid P [--workers 1,4,8,16] [--mib 1,16,64]
//                [--reps 3] [--total-mib 4096] [--device N] [--only pinned|ferry]
// --device: the GPU the trainer uses (ferryd on S must serve the same one);
// --only: one pattern (two instances on two GPUs at once, say).
#include <cuda_runtime.h>
#include <ferry/ferry.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
constexpr int kMaxSlots = 64;

#define CK(call)                                                                      \
  do {                                                                                \
    cudaError_t e_ = (call);                                                          \
    if (e_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(3);                                                                   \
    }                                                                                 \
  } while (0)

double now_s() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

double self_cpu_s() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

double proc_cpu_s(pid_t pid) {
  if (pid <= 0) return 0;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return 0;
  char buf[1024];
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  const char* p = std::strrchr(buf, ')');
  unsigned long ut = 0, st = 0;
  if (p == nullptr || std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2) return 0;
  return double(ut + st) / sysconf(_SC_CLK_TCK);
}

// Waits for a word shared between processes to reach a value: spins a
// little, then sleeps in short steps (both patterns wait the same way).
void wait_ge(const std::atomic<int64_t>& w, int64_t v) {
  for (int i = 0; w.load(std::memory_order_acquire) < v; ++i) {
    if (i < 200) {
      sched_yield();
    } else {
      timespec ts{0, 20'000};
      nanosleep(&ts, nullptr);
    }
  }
}

// What worker and trainer share (MAP_SHARED, made before fork).
struct Ctl {
  std::atomic<int64_t> next{0};     // next batch to claim
  std::atomic<int64_t> started{0};  // workers connected and ready
  std::atomic<int64_t> go{0};
  std::atomic<int64_t> free_for[kMaxSlots];  // slot s may take batch free_for[s]
  std::atomic<int64_t> ready[kMaxSlots];     // batch b is in slot b%K once ready[b%K] == b+1
  std::atomic<int64_t> failed{0};
  double worker_cpu[256];
  ferry_token tokens[kMaxSlots];
};

// Batch b: word i holds b * kMul + i. What a worker "decodes" into its own memory.
void produce(uint64_t* dst, uint64_t words, int64_t b) {
  const uint64_t base = uint64_t(b) * kMul;
  for (uint64_t i = 0; i < words; ++i) dst[i] = base + i;
}

__global__ void consume(const uint64_t* data, uint64_t words, uint64_t base, unsigned long long* wrong) {
  unsigned long long bad = 0;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < words; i += uint64_t(gridDim.x) * blockDim.x)
    bad += data[i] != base + i;
  if (bad != 0) atomicAdd(wrong, bad);
}

struct Config {
  bool ferry = false;
  int workers = 1;
  uint64_t bytes = 1 << 20;
  int64_t batches = 64;
  const char* socket = nullptr;
};

struct Result {
  double seconds = 0, cpu_trainer = 0, cpu_workers = 0, cpu_ferryd = 0;
  unsigned long long wrong = 0;
  bool ok = false;
};

void worker(Ctl* ctl, const Config& cfg, int k, char* shm, int id) {
  const uint64_t words = cfg.bytes / 8;
  std::vector<uint64_t> own(words);
  produce(own.data(), words, -1);  // faulted in
  ferry_client* c = nullptr;
  std::vector<ferry_buffer> bufs(k);
  if (cfg.ferry) {
    if (ferry_connect(cfg.socket, &c) != 0) std::_Exit(10);
    for (int s = 0; s < k; ++s)
      if (ferry_buffer_open(c, &ctl->tokens[s], &bufs[s], nullptr) != 0) std::_Exit(11);
  }
  ctl->started.fetch_add(1);
  wait_ge(ctl->go, 1);
  const double cpu0 = self_cpu_s();
  for (int64_t b; (b = ctl->next.fetch_add(1)) < cfg.batches;) {
    const int s = int(b % k);
    wait_ge(ctl->free_for[s], b);
    produce(own.data(), words, b);
    if (cfg.ferry) {
      ferry_ticket t = 0;
      if (ferry_upload(c, bufs[s], 0, own.data(), cfg.bytes, &t) != 0 || ferry_wait(c, t, -1) != 0) ctl->failed = 1;
    } else {
      std::memcpy(shm + uint64_t(s) * cfg.bytes, own.data(), cfg.bytes);  // into shared memory
    }
    ctl->ready[s].store(b + 1, std::memory_order_release);
  }
  ctl->worker_cpu[id] = self_cpu_s() - cpu0;
  if (c != nullptr) ferry_disconnect(c);
  std::_Exit(0);
}

Result run(const Config& cfg, pid_t ferryd) {
  const int k = std::min(kMaxSlots, 2 * cfg.workers);
  const uint64_t words = cfg.bytes / 8;
  auto* ctl = static_cast<Ctl*>(mmap(nullptr, sizeof(Ctl), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  new (ctl) Ctl();
  for (int s = 0; s < k; ++s) {
    ctl->free_for[s] = s;
    ctl->ready[s] = 0;
  }
  char* shm = nullptr;
  ferry_client* trainer = nullptr;
  std::vector<ferry_buffer> fbufs(k);
  const int pins = 4;  // (a): the pin-memory thread's page-locked buffers
  std::vector<void*> dev(std::max(k, pins), nullptr);
  std::vector<void*> pinned;
  if (cfg.ferry) {
    if (ferry_connect(cfg.socket, &trainer) != 0) std::exit(4);
    for (int s = 0; s < k; ++s) {
      ferry_ipc_handle h{};
      if (ferry_buffer_alloc(trainer, cfg.bytes, &fbufs[s]) != 0 ||
          ferry_buffer_grant(trainer, fbufs[s], FERRY_RIGHT_UPLOAD, &ctl->tokens[s]) != 0 ||
          ferry_buffer_export(trainer, fbufs[s], &h) != 0)
        std::exit(5);
      cudaIpcMemHandle_t ih;
      std::memcpy(&ih, h.data, sizeof ih);
      CK(cudaIpcOpenMemHandle(&dev[s], ih, cudaIpcMemLazyEnablePeerAccess));
    }
  } else {
    shm = static_cast<char*>(
        mmap(nullptr, uint64_t(k) * cfg.bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    std::memset(shm, 0, uint64_t(k) * cfg.bytes);  // faulted in, as the workers' segments are in (b)
    for (int s = 0; s < pins; ++s) {
      void* p = nullptr;
      CK(cudaMallocHost(&p, cfg.bytes));
      std::memset(p, 0, cfg.bytes);
      pinned.push_back(p);
      CK(cudaMalloc(&dev[s], cfg.bytes));
    }
  }
  unsigned long long* wrong = nullptr;
  CK(cudaMalloc(&wrong, sizeof *wrong));
  CK(cudaMemset(wrong, 0, sizeof *wrong));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int nev = std::max(k, pins);
  std::vector<cudaEvent_t> ev(nev);
  for (auto& e : ev) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  CK(cudaDeviceSynchronize());

  std::vector<pid_t> kids;
  for (int w = 0; w < cfg.workers; ++w) {
    pid_t p = fork();
    if (p == 0) worker(ctl, cfg, k, shm, w);
    kids.push_back(p);
  }
  wait_ge(ctl->started, cfg.workers);
  const double cpu0 = self_cpu_s(), d0 = proc_cpu_s(ferryd), t0 = now_s();
  ctl->go = 1;
  const int threads = 256, blocks = 1024;
  if (cfg.ferry) {
    // The batch is on the device once its worker saw the ticket: the kernel
    // reads the granted buffer in place. Its slot is free once the kernel is.
    for (int64_t b = 0; b < cfg.batches; ++b) {
      const int s = int(b % k);
      wait_ge(ctl->ready[s], b + 1);
      consume<<<blocks, threads, 0, stream>>>(static_cast<uint64_t*>(dev[s]), words, uint64_t(b) * kMul, wrong);
      CK(cudaEventRecord(ev[s], stream));
      const int64_t old = b - k / 2;  // keep half the slots in the GPU's hands
      if (old >= 0) {
        CK(cudaEventSynchronize(ev[old % k]));
        ctl->free_for[old % k].store(old + k, std::memory_order_release);
      }
    }
  } else {
    // The pin-memory thread copies each ready batch, in order, into a
    // page-locked buffer and frees the shared slot; this thread copies it to
    // the device and runs the kernel, in stream order.
    std::atomic<int64_t> pinned_ready{0}, released{0};
    std::thread pin([&] {
      for (int64_t b = 0; b < cfg.batches; ++b) {
        const int s = int(b % k);
        wait_ge(ctl->ready[s], b + 1);
        wait_ge(released, b - pins + 1);  // batch b - pins is off its pinned buffer
        std::memcpy(pinned[b % pins], shm + uint64_t(s) * cfg.bytes, cfg.bytes);
        ctl->free_for[s].store(b + k, std::memory_order_release);
        pinned_ready.store(b + 1, std::memory_order_release);
      }
    });
    for (int64_t b = 0; b < cfg.batches; ++b) {
      const int p = int(b % pins);
      wait_ge(pinned_ready, b + 1);
      CK(cudaMemcpyAsync(dev[p], pinned[p], cfg.bytes, cudaMemcpyHostToDevice, stream));
      consume<<<blocks, threads, 0, stream>>>(static_cast<uint64_t*>(dev[p]), words, uint64_t(b) * kMul, wrong);
      CK(cudaEventRecord(ev[p], stream));
      const int64_t old = b - (pins - 1);
      if (old >= 0) {
        CK(cudaEventSynchronize(ev[old % pins]));
        released.store(old + 1, std::memory_order_release);
      }
    }
    pin.join();
  }
  CK(cudaStreamSynchronize(stream));
  Result r;
  r.seconds = now_s() - t0;
  r.cpu_trainer = self_cpu_s() - cpu0;
  r.cpu_ferryd = cfg.ferry ? proc_cpu_s(ferryd) - d0 : 0;
  bool kids_ok = true;
  for (pid_t p : kids) {
    int st = 0;
    waitpid(p, &st, 0);
    kids_ok = kids_ok && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  for (int w = 0; w < cfg.workers; ++w) r.cpu_workers += ctl->worker_cpu[w];
  CK(cudaMemcpy(&r.wrong, wrong, sizeof r.wrong, cudaMemcpyDeviceToHost));
  r.ok = kids_ok && ctl->failed == 0 && r.wrong == 0;

  for (auto& e : ev) cudaEventDestroy(e);
  cudaStreamDestroy(stream);
  cudaFree(wrong);
  if (cfg.ferry) {
    for (int s = 0; s < k; ++s) cudaIpcCloseMemHandle(dev[s]);
    ferry_disconnect(trainer);
  } else {
    for (int s = 0; s < pins; ++s) {
      cudaFreeHost(pinned[s]);
      cudaFree(dev[s]);
    }
    munmap(shm, uint64_t(k) * cfg.bytes);
  }
  munmap(ctl, sizeof(Ctl));
  return r;
}

std::vector<int> list(const char* s) {
  std::vector<int> v;
  for (const char* p = s; *p;) {
    v.push_back(std::atoi(p));
    p = std::strchr(p, ',');
    if (p == nullptr) break;
    ++p;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const char* socket = nullptr;
  pid_t ferryd = 0;
  std::vector<int> workers{1, 4, 8, 16}, mibs{1, 16, 64};
  int reps = 3, device = 0;
  uint64_t total_mib = 4096;
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--socket") socket = argv[i + 1];
    else if (a == "--ferryd-pid") ferryd = std::atoi(argv[i + 1]);
    else if (a == "--workers") workers = list(argv[i + 1]);
    else if (a == "--mib") mibs = list(argv[i + 1]);
    else if (a == "--reps") reps = std::atoi(argv[i + 1]);
    else if (a == "--total-mib") total_mib = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--device") device = std::atoi(argv[i + 1]);
    else if (a == "--only") only = argv[i + 1];
    else socket = nullptr;  // unknown: usage
  }
  if (!only.empty() && only != "pinned" && only != "ferry") socket = nullptr;
  if (socket == nullptr || argc % 2 == 0) {
    std::fprintf(stderr,
                 "usage: loader_bench --socket PATH [--ferryd-pid PID] [--workers 1,4,8,16] [--mib 1,16,64]\n"
                 "                    [--reps 3] [--total-mib 4096] [--device N] [--only pinned|ferry]\n"
                 "Compares the pin-memory data-loader pattern with ferry on this GPU; prints a Markdown table.\n");
    return 2;
  }
  CK(cudaSetDevice(device));
  CK(cudaFree(nullptr));
  std::printf("| batch | workers | pinned batches/s | ferry batches/s | ferry ÷ pinned | pinned CPU ms/batch | "
              "ferry CPU ms/batch (ferryd) | wrong words |\n|---|---|---|---|---|---|---|---|\n");
  bool all_ok = true;
  for (int mib : mibs) {
    for (int w : workers) {
      Config cfg;
      cfg.workers = w;
      cfg.bytes = uint64_t(mib) << 20;
      cfg.batches = std::max<int64_t>(8 * w, int64_t(total_mib / mib));
      cfg.socket = socket;
      // Medians of reps runs each, alternating the two patterns.
      std::vector<double> rate[2], cpu[2], dcpu;
      unsigned long long wrong = 0;
      for (int r = 0; r < reps; ++r) {
        for (int f = 0; f < 2; ++f) {
          if ((only == "ferry" && f == 0) || (only == "pinned" && f == 1)) {
            rate[f].push_back(0);
            cpu[f].push_back(0);
            if (f == 1) dcpu.push_back(0);
            continue;
          }
          cfg.ferry = f == 1;
          Result x = run(cfg, ferryd);
          all_ok = all_ok && x.ok;
          wrong += x.wrong;
          rate[f].push_back(cfg.batches / x.seconds);
          cpu[f].push_back((x.cpu_trainer + x.cpu_workers + x.cpu_ferryd) * 1e3 / cfg.batches);
          if (f == 1) dcpu.push_back(x.cpu_ferryd * 1e3 / cfg.batches);
          if (!x.ok) std::fprintf(stderr, "run failed: %s, %d MiB, %d workers, %llu wrong\n", f ? "ferry" : "pinned", mib, w, x.wrong);
        }
      }
      auto med = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      };
      std::printf("| %d MiB | %d | %.0f | %.0f | %.2f× | %.2f | %.2f (%.2f) | %llu |\n", mib, w, med(rate[0]),
                  med(rate[1]), med(rate[1]) / med(rate[0]), med(cpu[0]), med(cpu[1]), med(dcpu), wrong);
      std::fflush(stdout);
    }
  }
  return all_ok ? 0 : 1;
}
