// SPDX-License-Identifier: MIT
// Internal objects of the simulated Level Zero driver.
//
// Every handle the driver gives out is a pointer to one of the objects below.
// Each starts with a tag so that a handle of the wrong kind, or one already
// destroyed, is refused instead of being used.
#pragma once

#include <level_zero/ze_api.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

namespace ferry::sim {

// ---------------------------------------------------------------- config
struct CostModel {
  uint64_t latency_ns = 5'000;      // per command on the engine
  double bytes_per_ns = 12.0;       // 12 GB/s; 0 = unlimited
  uint64_t pageable_ns = 20'000;    // per append from pageable memory
};

struct Config {
  uint32_t devices = 1;
  CostModel cost;
  uint64_t device_memory = 16ull << 30;
};

const Config& config();

// Spins or sleeps until the monotonic clock reaches deadline_ns.
uint64_t now_ns();

// Shared memory another process can hand us: a memfd of exactly `bytes`,
// sealed against shrinking and growing, so no mapping of it can fault later.
// Returns the fd (or -1 with errno set).
int sealed_memfd(const char* name, size_t bytes);
// Whether `fd` is sealed against shrinking and holds at least `bytes`: only
// then is it mapped. A peer could otherwise truncate it under our mapping.
bool safe_to_map(int fd, size_t bytes);
void wait_until(uint64_t deadline_ns);

// ---------------------------------------------------------------- tags
enum class Tag : uint32_t {
  dead = 0,
  driver = 0x46445256,
  device,
  context,
  queue,
  cmdlist,
  fence,
  event_pool,
  event,
  module,
  kernel,
  build_log,
  physical_mem,
};

struct Object {
  explicit Object(Tag t) : tag(t) {}
  Object(const Object&) = delete;
  Object& operator=(const Object&) = delete;
  virtual ~Object() { tag = Tag::dead; }
  Tag tag;
};

// A handle that cannot be one of ours (null, the first page, misaligned, or
// outside user space: an uninitialised variable, say) is refused before it
// is read, so a caller's garbage gets INVALID_NULL_HANDLE, not a crash here.
inline bool plausible(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  return a >= 4096 && a < (uintptr_t{1} << 47) && a % alignof(Object) == 0;
}

template <class T, class H>
T* get(H handle) {
  auto* o = reinterpret_cast<Object*>(handle);
  if (!plausible(o) || o->tag != T::kTag) return nullptr;
  return static_cast<T*>(o);
}

template <class H, class T>
H handle(T* obj) {
  return reinterpret_cast<H>(static_cast<Object*>(obj));
}

// ---------------------------------------------------------------- faults
struct Faults {
  std::atomic<uint64_t> copies_executed{0};
  std::atomic<uint64_t> fail_at{0};  // copies_executed value that fails; 0 = off
  std::atomic<bool> lose_device{false};
  std::atomic<bool> device_lost{false};
};
Faults& faults();

// ---------------------------------------------------------------- driver
struct Device;

struct Driver : Object {
  static constexpr Tag kTag = Tag::driver;
  Driver() : Object(kTag) {}
  std::vector<std::unique_ptr<Device>> devices;
};

Driver* the_driver();  // created at first zeInit

struct Device : Object {
  static constexpr Tag kTag = Tag::device;
  Device(Driver* d, uint32_t i) : Object(kTag), driver(d), index(i) {}
  Driver* driver;
  uint32_t index;
  std::atomic<uint64_t> device_bytes{0};
  std::atomic<int> high_running{0};  // high-priority engines executing a command now
};

// Queue groups every simulated device has.
constexpr uint32_t kComputeOrdinal = 0;
constexpr uint32_t kCopyOrdinal = 1;
constexpr uint32_t kQueuesPerGroup[2] = {4, 2};

struct Context : Object {
  static constexpr Tag kTag = Tag::context;
  explicit Context(Driver* d) : Object(kTag), driver(d) {}
  Driver* driver;
};

// ---------------------------------------------------------------- memory
enum class AllocKind { host, device, shared, ipc_opened };

struct Alloc {
  uintptr_t base = 0;
  size_t size = 0;      // what the caller asked for
  size_t mapped = 0;    // what is mapped (page multiple)
  AllocKind kind = AllocKind::host;
  Device* device = nullptr;
  int fd = -1;          // memfd backing device memory; -1 otherwise
};

// Process-wide registry of USM allocations and imported host ranges.
class Memory {
 public:
  ze_result_t alloc(AllocKind kind, Device* dev, size_t size, size_t align, void** out);
  ze_result_t free(void* ptr);
  ze_result_t open_ipc(Device* dev, int fd, void** out);
  // Returns the allocation containing ptr, if any.
  bool find(const void* ptr, Alloc* out) const;
  // Whether [ptr, ptr+n) lies in host USM, shared USM or an imported range.
  bool is_pinned_host(const void* ptr, size_t n) const;
  // Checks a copy operand: ZE_RESULT_ERROR_INVALID_SIZE if it starts inside a
  // known allocation and runs past its end.
  ze_result_t check_range(const void* ptr, size_t n) const;

  ze_result_t import(void* ptr, size_t n);
  ze_result_t release_import(void* ptr);

 private:
  mutable std::shared_mutex mu_;
  std::map<uintptr_t, Alloc> allocs_;
  std::map<uintptr_t, size_t> imports_;  // base -> size
};
Memory& memory();

// ---------------------------------------------------------------- events
// The state of every event lives in a memfd mapping owned by its pool, so an
// IPC-opened pool in another process sees the same words and futexes work
// across processes.
enum EventState : uint32_t { kClear = 0, kSignaled = 1, kFailed = 2 };

struct EventSlot {
  std::atomic<uint32_t> state;
  std::atomic<uint32_t> waiters;  // threads (of any process) in FUTEX_WAIT on state
  // The device clock (now_ns) when the command that signals it started and
  // ended: zeEventQueryKernelTimestamp. Written before the state.
  uint64_t started_ns;
  uint64_t ended_ns;
  uint32_t pad[10];
};
static_assert(sizeof(EventSlot) == 64);

struct EventPool : Object {
  static constexpr Tag kTag = Tag::event_pool;
  EventPool() : Object(kTag) {}
  ~EventPool() override;
  uint32_t count = 0;
  int fd = -1;
  bool ipc_capable = false;
  bool opened_from_ipc = false;
  bool kernel_timestamps = false;  // ZE_EVENT_POOL_FLAG_KERNEL_TIMESTAMP
  EventSlot* slots = nullptr;
  size_t mapped = 0;
  // Events made from it and not destroyed: the spec has them destroyed
  // before their pool, and a pool that goes first is refused (IN_USE).
  std::atomic<uint32_t> events{0};
};

struct Event : Object {
  static constexpr Tag kTag = Tag::event;
  Event(EventPool* p, uint32_t i) : Object(kTag), pool(p), index(i) {}
  EventPool* pool;
  uint32_t index;
  std::atomic<uint32_t>& state() { return pool->slots[index].state; }
  std::atomic<uint32_t>& waiters() { return pool->slots[index].waiters; }
  void signal(uint32_t value);
  // Records when the command that signals it ran, then signals it.
  void signal(uint32_t value, uint64_t started_ns, uint64_t ended_ns);
  // Waits until the event is no longer clear or timeout_ns passes.
  // Returns the state seen.
  uint32_t wait(uint64_t timeout_ns);
};

// ---------------------------------------------------------------- kernels
enum class Builtin { busy, checksum, fill };

struct Module : Object {
  static constexpr Tag kTag = Tag::module;
  Module() : Object(kTag) {}
};

struct BuildLog : Object {
  static constexpr Tag kTag = Tag::build_log;
  BuildLog() : Object(kTag) {}
  std::string text;
};

constexpr int kMaxKernelArgs = 3;

struct Kernel : Object {
  static constexpr Tag kTag = Tag::kernel;
  Kernel() : Object(kTag) {}
  Builtin builtin = Builtin::busy;
  std::string name;
  int nargs = 0;
  size_t arg_size[kMaxKernelArgs] = {};
  uint64_t args[kMaxKernelArgs] = {};
  bool arg_set[kMaxKernelArgs] = {};
  ze_kernel_indirect_access_flags_t indirect_access = 0;
};

// ---------------------------------------------------------------- engine
struct Command {
  enum class Op {
    copy, fill, signal, reset, barrier, kernel, fence, write_mem, wait_mem, timestamp,
    query_timestamps,  // writes extra->queried events' kernel timestamps to extra->stamps
    kernels_indirect,  // runs the first *extra->count_word of extra->kernels
  } op = Op::barrier;
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
  std::vector<uint8_t> pattern;
  Builtin builtin = Builtin::busy;
  uint64_t args[kMaxKernelArgs] = {};
  std::vector<Event*> waits;
  Event* signal = nullptr;
  struct Fence* fence = nullptr;
  // timestamp: stores the device's clock (now_ns) at dst when it executes.
  // write_mem: stores `value` (8 bytes) at dst. wait_mem: holds this queue
  // until the 4- or 8-byte word at dst compares to `value` as `wait_flags` say.
  uint64_t value = 0;
  uint32_t wait_flags = 0;
  uint32_t wait_bytes = 8;
  struct Launch {
    Builtin builtin;
    uint64_t args[kMaxKernelArgs];
  };
  // What only the rare commands carry, apart: every copy moves a Command
  // twice on its way to the engine, and three more vectors there cost
  // ferryd ~13% more instructions per upload (bench/profile.sh).
  struct Extra {
    std::vector<Event*> queried;
    std::vector<ze_kernel_timestamp_result_t*> stamps;
    std::vector<Launch> kernels;
    const uint32_t* count_word = nullptr;
  };
  std::shared_ptr<const Extra> extra;  // shared: a regular list's commands run again
};

// A FIFO of commands in one growing array: a deque allocated a block per
// three commands on the submitting thread and freed it on the engine's.
class CommandRing {
 public:
  bool empty() const { return count_ == 0; }
  void push(Command&& c) {
    if (count_ == slots_.size()) grow();
    slots_[(head_ + count_) & (slots_.size() - 1)] = std::move(c);
    ++count_;
  }
  Command pop() {
    Command c = std::move(slots_[head_]);
    slots_[head_] = Command{};  // let go of what it holds now
    head_ = (head_ + 1) & (slots_.size() - 1);
    --count_;
    return c;
  }

 private:
  void grow() {
    std::vector<Command> bigger(slots_.empty() ? 64 : slots_.size() * 2);
    for (size_t i = 0; i < count_; ++i) bigger[i] = std::move(slots_[(head_ + i) & (slots_.size() - 1)]);
    slots_.swap(bigger);
    head_ = 0;
  }
  std::vector<Command> slots_;  // a power of two long
  size_t head_ = 0, count_ = 0;
};

// One in-order engine: a thread that executes commands in submission order.
class Engine {
 public:
  Engine();
  ~Engine();
  void submit(std::vector<Command> cmds);
  void submit(Command c);  // one, without a vector (an immediate list's append)
  // Blocks until everything submitted so far has executed, or timeout.
  bool drain(uint64_t timeout_ns);
  // The queue's priority (ZE_COMMAND_QUEUE_PRIORITY_*), against the other
  // engines of its device: a high-priority engine counts itself in
  // `high_running` while it executes; a low-priority one lets such commands
  // finish first (at most 1 ms each time) and runs at nice 10.
  void set_priority(ze_command_queue_priority_t p, std::atomic<int>* high_running) {
    high_running_ = high_running;
    priority_ = p == ZE_COMMAND_QUEUE_PRIORITY_PRIORITY_HIGH ? 1 : p == ZE_COMMAND_QUEUE_PRIORITY_PRIORITY_LOW ? -1 : 0;
  }

 private:
  void run();
  void execute(Command& c);
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  CommandRing queue_;
  uint64_t submitted_ = 0;
  uint64_t executed_ = 0;
  bool stop_ = false;
  std::atomic<bool> stopping_{false};  // read by a wait on memory, which holds no lock
  std::atomic<int> priority_{0};                  // -1 low, 0 normal, 1 high
  std::atomic<std::atomic<int>*> high_running_{nullptr};
  bool pending_failure_ = false;       // a command failed and no event said so yet (engine thread only)
  bool faulted_ = false;               // a command failed: memory writes stop for good (engine thread only)
  std::thread thread_;
};

struct Fence : Object {
  static constexpr Tag kTag = Tag::fence;
  Fence() : Object(kTag) {}
  std::atomic<uint32_t> state{0};
};

struct Queue : Object {
  static constexpr Tag kTag = Tag::queue;
  Queue() : Object(kTag) {}
  Device* device = nullptr;
  uint32_t ordinal = 0;
  bool synchronous = false;  // ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS: execute returns once the lists ran
  Engine engine;
};

struct CmdList : Object {
  static constexpr Tag kTag = Tag::cmdlist;
  CmdList() : Object(kTag) {}
  Device* device = nullptr;
  uint32_t ordinal = 0;
  bool closed = false;
  bool synchronous = false;        // immediate, ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS: each append returns once done
  std::unique_ptr<Engine> engine;  // immediate lists only
  std::mutex mu;                   // recorded commands of a regular list
  std::vector<Command> recorded;
};

// Adds c to the list: executes it on an immediate list, records it otherwise.
ze_result_t append(CmdList* list, Command c, uint32_t nwait, ze_event_handle_t* waits);
// The event an append signals (nullptr for none), or INVALID_NULL_HANDLE.
ze_result_t signal_event(ze_event_handle_t h, Event** out);
// Checks a launch of k on l (engine, arguments, the memory they name) and
// captures its arguments.
ze_result_t prepare_launch(CmdList* l, Kernel* k, Command::Launch* out);

}  // namespace ferry::sim
