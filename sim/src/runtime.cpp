// SPDX-License-Identifier: MIT
// Configuration, time, memory registry and events of the simulated device.
#include <linux/futex.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <ctime>

#include "sim.hpp"

namespace ferry::sim {

namespace {

uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  unsigned long long x = std::strtoull(v, &end, 10);
  return (end != nullptr && *end == '\0') ? x : fallback;
}

double env_double(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  double x = std::strtod(v, &end);
  return (end != nullptr && *end == '\0' && x >= 0) ? x : fallback;
}

// MemAvailable of /proc/meminfo in bytes (16 GiB where it cannot be read).
uint64_t host_available() {
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[128];
    unsigned long long kib = 0;
    while (std::fgets(line, sizeof line, f) != nullptr)
      if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
    std::fclose(f);
    if (kib != 0) return uint64_t{kib} * 1024;
  }
  return 32ull << 30;
}

Config load_config() {
  Config c;
  c.devices = static_cast<uint32_t>(env_u64("FERRY_SIM_DEVICES", 1));
  if (c.devices < 1) c.devices = 1;
  if (c.devices > 16) c.devices = 16;
  c.cost.latency_ns = env_u64("FERRY_SIM_LATENCY_US", 5) * 1000;
  c.cost.bytes_per_ns = env_double("FERRY_SIM_BANDWIDTH_GBPS", 12.0);
  c.cost.pageable_ns = env_u64("FERRY_SIM_PAGEABLE_US", 20) * 1000;
  // The simulated device's memory is this host's (memfds): by default at most
  // half of what the host has available now, so that allocations past it
  // fail with an error and never wake the kernel's OOM killer.
  c.device_memory = env_u64("FERRY_SIM_DEVICE_MEMORY", std::min<uint64_t>(16ull << 30, host_available() / 2));
  const char* fast = std::getenv("FERRY_SIM_FAST");
  if (fast != nullptr && std::strcmp(fast, "1") == 0) c.cost = CostModel{0, 0.0, 0};
  uint64_t fail = env_u64("FERRY_SIM_FAIL_COPY", 0);
  if (fail != 0) {
    faults().fail_at = fail;
    const char* mode = std::getenv("FERRY_SIM_FAIL_MODE");
    faults().lose_device = mode != nullptr && std::strcmp(mode, "lost") == 0;
  }
  return c;
}

long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* ts) {
  // Not FUTEX_PRIVATE: event words are shared between processes.
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0);
}

size_t page_round(size_t n) {
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (n + page - 1) / page * page;
}

}  // namespace

Faults& faults() {
  static Faults f;
  return f;
}

const Config& config() {
  static const Config c = load_config();
  return c;
}

uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void wait_until(uint64_t deadline_ns) {
  // Sleep while far away, spin the last stretch. Engine threads set a 1 us
  // timer slack (see Engine), so their sleeps end close to when asked.
  for (;;) {
    uint64_t now = now_ns();
    if (now >= deadline_ns) return;
    uint64_t left = deadline_ns - now;
    if (left > 30'000) {
      uint64_t nap = left - 10'000;
      timespec ts{static_cast<time_t>(nap / 1'000'000'000ull), static_cast<long>(nap % 1'000'000'000ull)};
      nanosleep(&ts, nullptr);
    }
  }
}

// ---------------------------------------------------------------- memory
Memory& memory() {
  static Memory m;
  return m;
}

ze_result_t Memory::alloc(AllocKind kind, Device* dev, size_t size, size_t align, void** out) {
  if (size == 0) return ZE_RESULT_ERROR_UNSUPPORTED_SIZE;
  if (align != 0 && (align & (align - 1)) != 0) return ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT;
  if (align > 65536) return ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT;
  Alloc a;
  a.size = size;
  a.mapped = page_round(size);
  a.kind = kind;
  a.device = dev;
  void* p = MAP_FAILED;
  if (kind == AllocKind::device) {
    if (dev->device_bytes.fetch_add(a.mapped) + a.mapped > config().device_memory) {
      dev->device_bytes.fetch_sub(a.mapped);
      return ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY;
    }
    // Device memory is a memfd, so that its IPC handle can carry a file
    // descriptor another process maps (the way a dma-buf works on real GPUs).
    a.fd = sealed_memfd("ferry-sim-device", a.mapped);
    if (a.fd < 0) {
      dev->device_bytes.fetch_sub(a.mapped);
      return ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY;
    }
    p = mmap(nullptr, a.mapped, PROT_READ | PROT_WRITE, MAP_SHARED, a.fd, 0);
  } else {
    p = mmap(nullptr, a.mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  }
  if (p == MAP_FAILED) {
    if (a.fd >= 0) close(a.fd);
    if (kind == AllocKind::device) dev->device_bytes.fetch_sub(a.mapped);
    return kind == AllocKind::device ? ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY : ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  }
  a.base = reinterpret_cast<uintptr_t>(p);
  std::unique_lock lock(mu_);
  allocs_[a.base] = a;
  *out = p;
  return ZE_RESULT_SUCCESS;
}

int sealed_memfd(const char* name, size_t bytes) {
  int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

bool safe_to_map(int fd, size_t bytes) {
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) return false;
  struct stat st {};
  return fstat(fd, &st) == 0 && st.st_size > 0 && static_cast<uint64_t>(st.st_size) >= bytes;
}

ze_result_t Memory::open_ipc(Device* dev, int fd, void** out) {
  off_t size = lseek(fd, 0, SEEK_END);
  // No allocation of a real device is larger than its memory: a bigger
  // "handle" is not one, and mapping it would take the address space.
  if (size <= 0 || static_cast<uint64_t>(size) > config().device_memory || !safe_to_map(fd, static_cast<size_t>(size)))
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  void* p = mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  Alloc a;
  a.base = reinterpret_cast<uintptr_t>(p);
  a.size = a.mapped = static_cast<size_t>(size);
  a.kind = AllocKind::ipc_opened;
  a.device = dev;
  std::unique_lock lock(mu_);
  allocs_[a.base] = a;
  *out = p;
  return ZE_RESULT_SUCCESS;
}

ze_result_t Memory::free(void* ptr) {
  Alloc a;
  {
    std::unique_lock lock(mu_);
    auto it = allocs_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == allocs_.end()) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    a = it->second;
    allocs_.erase(it);
  }
  munmap(reinterpret_cast<void*>(a.base), a.mapped);
  if (a.fd >= 0) close(a.fd);
  if (a.kind == AllocKind::device) a.device->device_bytes.fetch_sub(a.mapped);
  return ZE_RESULT_SUCCESS;
}

bool Memory::find(const void* ptr, Alloc* out) const {
  auto p = reinterpret_cast<uintptr_t>(ptr);
  std::shared_lock lock(mu_);
  auto it = allocs_.upper_bound(p);
  if (it == allocs_.begin()) return false;
  --it;
  if (p >= it->second.base + it->second.size) return false;
  if (out != nullptr) *out = it->second;
  return true;
}

bool Memory::is_pinned_host(const void* ptr, size_t n) const {
  Alloc a;
  if (find(ptr, &a)) return a.kind != AllocKind::device && a.kind != AllocKind::ipc_opened;
  auto p = reinterpret_cast<uintptr_t>(ptr);
  std::shared_lock lock(mu_);
  auto it = imports_.upper_bound(p);
  if (it == imports_.begin()) return false;
  --it;
  return p >= it->first && p + n <= it->first + it->second;
}

ze_result_t Memory::check_range(const void* ptr, size_t n) const {
  Alloc a;
  if (!find(ptr, &a)) return ZE_RESULT_SUCCESS;  // host memory the driver does not know
  auto p = reinterpret_cast<uintptr_t>(ptr);
  if (n > a.size || p - a.base > a.size - n) return ZE_RESULT_ERROR_INVALID_SIZE;
  return ZE_RESULT_SUCCESS;
}

ze_result_t Memory::import(void* ptr, size_t n) {
  if (ptr == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (n == 0) return ZE_RESULT_ERROR_INVALID_SIZE;
  auto p = reinterpret_cast<uintptr_t>(ptr);
  if (p + n < p) return ZE_RESULT_ERROR_INVALID_SIZE;
  if (find(ptr, nullptr)) return ZE_RESULT_ERROR_INVALID_ARGUMENT;  // already USM
  std::unique_lock lock(mu_);
  // Refuse a range that overlaps one already imported, as the compute runtime does.
  auto it = imports_.lower_bound(p);
  if (it != imports_.end() && it->first < p + n) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  if (it != imports_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second > p) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  imports_[p] = n;
  return ZE_RESULT_SUCCESS;
}

ze_result_t Memory::release_import(void* ptr) {
  std::unique_lock lock(mu_);
  auto it = imports_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == imports_.end()) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  imports_.erase(it);
  return ZE_RESULT_SUCCESS;
}

// ---------------------------------------------------------------- events
EventPool::~EventPool() {
  if (slots != nullptr) munmap(slots, mapped);
  if (fd >= 0 && !opened_from_ipc) close(fd);
}

void Event::signal(uint32_t value) {
  // Once the store is seen, the host may destroy this Event: touch only the
  // pool's word (which outlives its events) after it.
  std::atomic<uint32_t>* word = &state();
  std::atomic<uint32_t>* waiting = &waiters();
  word->store(value, std::memory_order_seq_cst);
  // A waiter raises `waiters` before it re-checks the state and sleeps, so
  // seeing zero here means nobody can sleep through this store.
  if (waiting->load(std::memory_order_seq_cst) != 0) futex(word, FUTEX_WAKE, INT_MAX, nullptr);
}

void Event::signal(uint32_t value, uint64_t started_ns, uint64_t ended_ns) {
  EventSlot& slot = pool->slots[index];
  // Relaxed stores the signal's seq_cst store publishes: a reader that sees
  // the state signalled sees these.
  __atomic_store_n(&slot.started_ns, started_ns, __ATOMIC_RELAXED);
  __atomic_store_n(&slot.ended_ns, ended_ns, __ATOMIC_RELAXED);
  signal(value);
}

uint32_t Event::wait(uint64_t timeout_ns) {
  uint32_t s = state().load(std::memory_order_acquire);
  if (s != kClear || timeout_ns == 0) return s;
  const bool forever = timeout_ns == UINT64_MAX;
  const uint64_t deadline = forever ? 0 : now_ns() + timeout_ns;
  for (;;) {
    timespec ts{};
    const timespec* tsp = nullptr;
    if (!forever) {
      uint64_t now = now_ns();
      if (now >= deadline) return state().load(std::memory_order_acquire);
      uint64_t left = deadline - now;
      ts.tv_sec = static_cast<time_t>(left / 1'000'000'000ull);
      ts.tv_nsec = static_cast<long>(left % 1'000'000'000ull);
      tsp = &ts;
    }
    waiters().fetch_add(1, std::memory_order_seq_cst);
    if (state().load(std::memory_order_seq_cst) == kClear) futex(&state(), FUTEX_WAIT, kClear, tsp);
    waiters().fetch_sub(1, std::memory_order_seq_cst);
    s = state().load(std::memory_order_acquire);
    if (s != kClear) return s;
  }
}

}  // namespace ferry::sim
