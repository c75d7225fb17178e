// SPDX-License-Identifier: MIT
// The seam between the transfer engine and a device. Level Zero and CUDA
// implement it; the engine knows nothing else of the device.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ferry::ferryd {

struct DeviceInfo {
  std::string backend;      // "level-zero", "cuda"
  std::string name;         // device name as the driver reports it
  std::string driver;       // driver / runtime description
  uint64_t memory_bytes = 0;
  bool copy_engine = false; // copies run on a copy-only engine
  bool host_import = false; // staging segments are registered with the driver
  bool device_writes = false; // submit() takes a TimelineWrite: the device writes each client's timeline
  // How the GPU is shared with the applications' own contexts: "mps" (NVIDIA
  // MPS: one context on the device, kernels and ferry's copies overlap) or
  // "time-sliced" (each context gets the GPU in turn); "" where the backend
  // has no such notion (Level Zero).
  std::string sharing;
  // Why the simulated device serves in place of a GPU (no GPU driver on the
  // host, --fallback-sim); "" when it is the device asked for.
  std::string fallback;
  // The device's identity as NVIDIA's DCGM exporter labels it, so that
  // ferry's series join the GPU's own: UUID ("GPU-" and 8-4-4-4-12 hex on
  // CUDA, as nvidia-smi prints it; the driver's 16 bytes in hex on Level
  // Zero, the simulated device's included) and pci_bus_id
  // ("00000000:3B:00.0"); "" where the driver does not say.
  std::string uuid;
  std::string pci_bus_id;
};

// 16 bytes as 8-4-4-4-12 lowercase hex, after `prefix`.
std::string format_uuid(const unsigned char (&id)[16], const char* prefix);
// A PCI address as DCGM and nvidia-smi write it: 8 hex digits of domain.
std::string format_pci_bus_id(unsigned domain, unsigned bus, unsigned device, unsigned function);

// An IPC handle of a device allocation or event pool, as the driver gives it.
struct IpcHandle {
  uint32_t kind = 0;        // proto::IpcKind
  uint8_t data[64] = {};
  int fd = -1;              // Level Zero: the fd its first bytes name; owned by the driver
};

// After a copy, signal event `index` of an IPC event pool a client registered.
struct Signal {
  uint64_t pool = 0;        // as open_event_pool returned it
  uint32_t index = 0;
};

// After a copy, the device writes `value` into `word` (8 bytes inside a
// registered staging segment): a client's timeline, in queue order.
struct TimelineWrite {
  uint64_t* word = nullptr;
  uint64_t device = 0;  // the word's address on the device, where it has its own (CUDA); 0: none
  uint64_t value = 0;
};

// The words one submission writes after its copy, in this order: the
// client's timeline and, for an upload_fenced entry, the fence of the buffer's owner.
struct DeviceWrites {
  TimelineWrite w[2];
  size_t n = 0;
  void add(uint64_t* word, uint64_t device, uint64_t value) { w[n++] = {word, device, value}; }
};

struct Done {
  uint64_t cookie;
  int status;               // 0 or a negative errno
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const DeviceInfo& info() const = 0;
  void set_fallback(const std::string& why) { const_cast<DeviceInfo&>(info()).fallback = why; }

  // Everything below is called on the data thread (ferryd's io thread),
  // except where said. Device memory:
  virtual int alloc(uint64_t bytes, void** out) = 0;
  virtual void free(void* ptr) = 0;

  // Registers a host range (a staging segment) so copies from it run at
  // pinned speed. -ENOTSUP: the driver cannot; copies still work, slower.
  // *device: where the device sees the range, where that is an address of
  // its own that its writes need (CUDA, with device writes), else 0; the
  // caller keeps it with the range (StagingSegment), so that nothing is
  // looked up, or locked, per copy. Both are called from the segment pool's
  // thread as well as the io thread's: they must be safe beside every other call.
  virtual int register_host(void* ptr, uint64_t bytes, uint64_t* device) = 0;
  virtual void unregister_host(void* ptr) = 0;

  // Queues a copy (either direction); with `writes`, the device then writes
  // each value, in order (Level Zero zexCommandListAppendWriteToMemory, CUDA
  // cuStreamWriteValue64; only where info().device_writes, and only words of
  // registered segments: -ENOTSUP otherwise). bytes == 0: the
  // writes alone. The cookie is reported once all of it ran, so nothing it
  // touches may go before. Work completes in submission order.
  virtual int submit(void* dst, const void* src, uint64_t bytes, uint64_t cookie, const Signal* signal = nullptr,
                     const DeviceWrites* writes = nullptr) = 0;

  // Sharing with clients' own contexts. Each returns -ENOTSUP where the
  // backend cannot. export_buffer: an IPC handle of a device allocation.
  virtual int export_buffer(void* ptr, IpcHandle* out) = 0;
  // Opens a client's allocation; `fd` (if any) is the daemon's copy, closed by the caller after.
  // *mapped: the size of the whole allocation the handle maps (at least bytes).
  virtual int import_buffer(const IpcHandle& h, uint64_t bytes, void** out, uint64_t* mapped) = 0;
  virtual void release_import(void* ptr) = 0;
  // Opens a client's IPC event pool of `count` events; *id names it in submit().
  virtual int open_event_pool(const IpcHandle& h, uint32_t count, uint64_t* id) = 0;
  virtual void close_event_pool(uint64_t id) = 0;

  // The data thread's, and it never waits: appends the oldest queued copy
  // and every later one already finished to `out`, in submission order.
  // Returns the number appended.
  virtual size_t reap(std::vector<Done>& out) = 0;
  // The data thread goes to sleep: 1 is written to the eventfd `efd` once
  // the oldest queued copy ends (by a waiter that owns no data, InFlight).
  // False when no copy is queued.
  virtual bool arm(int efd) = 0;

  // Whether the device is gone for good (after a failed copy, say). A lost
  // device takes no more work.
  virtual bool lost() = 0;

  // As the poller goes to sleep: what a burst of copies made and
  // no copy has used for a while (ferryd's own event pools) may go.
  virtual void trim() {}
};

// Each returns nullptr with `why` set when the backend cannot run here.
std::unique_ptr<Backend> make_level_zero_backend(uint32_t device, std::string& why);
std::unique_ptr<Backend> make_cuda_backend(uint32_t device, std::string& why);

}  // namespace ferry::ferryd
