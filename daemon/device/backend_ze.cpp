// SPDX-License-Identifier: MIT
// Level Zero backend: one context, an immediate command list on a copy-only
// queue group when the device has one, host-visible events for completion.
// The loader is opened at run time, so ferryd starts without it.
#include <dlfcn.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>

#include "device/backend.hpp"
#include "device/ze_api.hpp"
#include "device/ze_events.hpp"
#include "device/inflight.hpp"
#include "log.hpp"

namespace ferry::ferryd {
namespace {

using namespace ze;

class LevelZero final : public Backend {
 public:
  ~LevelZero() override {
    inflight_.stop();  // its waiter may be looking at one of our events
    // Copies may still be queued (a stop past --drain): they signal our
    // events, so the queue finishes before the events go.
    if (list_ != nullptr) {
      if (ze_event_handle_t ev = events_.take(); ev != nullptr) {
        if (ze_.zeCommandListAppendBarrier(list_, ev, 0, nullptr) == ZE_RESULT_SUCCESS)
          ze_.zeEventHostSynchronize(ev, UINT64_MAX);
      }
    }
    events_.clear();
    if (list_ != nullptr) ze_.zeCommandListDestroy(list_);
    if (ctx_ != nullptr) ze_.zeContextDestroy(ctx_);
    // The loader stays loaded: unloading it while driver threads may still
    // exist is not worth the risk at exit.
  }

  bool open(uint32_t index, std::string& why) {
    return load_loader(why) && find_device(index, why) && setup(why);
  }

  // The loader's functions.
  bool load_loader(std::string& why) {
    ze_.lib = dlopen("libze_loader.so.1", RTLD_NOW | RTLD_LOCAL);
    if (ze_.lib == nullptr) {
      why = "Level Zero loader (libze_loader.so.1) not found: install libze1";
      return false;
    }
#define X(f)                                                          \
  ze_.f = reinterpret_cast<decltype(&::f)>(dlsym(ze_.lib, #f));       \
  if (ze_.f == nullptr) {                                             \
    why = "Level Zero loader lacks " #f;                              \
    return false;                                                     \
  }
    FERRY_ZE_FUNCS(X)
#undef X
    ze_.translate = reinterpret_cast<decltype(&::zelLoaderTranslateHandle)>(dlsym(ze_.lib, "zelLoaderTranslateHandle"));
    return true;
  }

  // The device of that index, across the drivers in discovery order.
  bool find_device(uint32_t index, std::string& why) {
    if (ze_result_t r = ze_.zeInit(ZE_INIT_FLAG_GPU_ONLY); r != ZE_RESULT_SUCCESS) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "Level Zero: zeInit failed (0x%x): no GPU driver found", static_cast<unsigned>(r));
      why = buf;
      return false;
    }
    uint32_t ndrv = 0;
    ze_.zeDriverGet(&ndrv, nullptr);
    std::vector<ze_driver_handle_t> drivers(ndrv);
    if (ndrv == 0 || ze_.zeDriverGet(&ndrv, drivers.data()) != ZE_RESULT_SUCCESS) {
      why = "Level Zero: no driver";
      return false;
    }
    // Devices are numbered across drivers in discovery order.
    uint32_t seen = 0;
    for (auto* drv : drivers) {
      uint32_t ndev = 0;
      ze_.zeDeviceGet(drv, &ndev, nullptr);
      std::vector<ze_device_handle_t> devs(ndev);
      ze_.zeDeviceGet(drv, &ndev, devs.data());
      if (index < seen + ndev) {
        driver_ = drv;
        device_ = devs[index - seen];
        break;
      }
      seen += ndev;
    }
    if (device_ == nullptr) {
      why = "Level Zero: no device " + std::to_string(index) + " (" + std::to_string(seen) + " found)";
      return false;
    }
    return true;
  }

  const DeviceInfo& info() const override { return info_; }

  int alloc(uint64_t bytes, void** out) override {
    ze_device_mem_alloc_desc_t d{ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, nullptr, 0, 0};
    return to_errno(ze_.zeMemAllocDevice(ctx_, &d, bytes, 64, device_, out));
  }

  void free(void* ptr) override { ze_.zeMemFree(ctx_, ptr); }

  int register_host(void* ptr, uint64_t bytes, uint64_t* device) override {
    *device = 0;  // its writes take the host address (USM host memory)
    if (import_ == nullptr) return -ENOTSUP;
    return import_(native_driver_, ptr, bytes) == ZE_RESULT_SUCCESS ? 0 : -ENOTSUP;
  }

  void unregister_host(void* ptr) override {
    if (release_ != nullptr) release_(native_driver_, ptr);
  }

  int submit(void* dst, const void* src, uint64_t bytes, uint64_t cookie, const Signal* signal,
             const DeviceWrites* writes) override {
    const size_t n = writes != nullptr ? writes->n : 0;
    ze_event_handle_t client_event = nullptr;
    if (signal != nullptr) {
      client_event = pool_event(signal->pool, signal->index);
      if (client_event == nullptr) return -EINVAL;
    }
    if (n != 0 && write_ == nullptr) return -ENOTSUP;
    ze_event_handle_t ev = events_.take();
    if (ev == nullptr) return -ENOMEM;
    ze_result_t r = ZE_RESULT_SUCCESS;
    if (client_event == nullptr && n == 0) {
      r = ze_.zeCommandListAppendMemoryCopy(list_, dst, src, bytes, ev, 0, nullptr);
    } else {
      // copy -> the client's event -> the timeline -> ours: the copy retires
      // only once the rest ran, so neither the client's pool nor its segment
      // goes away under them.
      if (bytes != 0) r = ze_.zeCommandListAppendMemoryCopy(list_, dst, src, bytes, nullptr, 0, nullptr);
      if (r == ZE_RESULT_SUCCESS && client_event != nullptr) r = ze_.zeCommandListAppendSignalEvent(list_, client_event);
      for (size_t i = 0; i < n && r == ZE_RESULT_SUCCESS; ++i) {
        WriteToMemDesc d{kScopeHost};  // a host process reads it
        r = write_(native_list_, &d, writes->w[i].word, writes->w[i].value);
      }
      if (r == ZE_RESULT_SUCCESS) r = ze_.zeCommandListAppendBarrier(list_, ev, 0, nullptr);
    }
    if (r != ZE_RESULT_SUCCESS) {
      events_.give(ev);
      return to_errno(r);
    }
    inflight_.push(ev, cookie);
    return 0;
  }

  int export_buffer(void* ptr, IpcHandle* out) override {
    ze_ipc_mem_handle_t h{};
    if (ze_.zeMemGetIpcHandle(ctx_, ptr, &h) != ZE_RESULT_SUCCESS) return -ENOTSUP;
    out->kind = 1;  // proto::kIpcLevelZero
    std::memcpy(out->data, h.data, sizeof out->data);
    std::memcpy(&out->fd, h.data, sizeof(int));  // the fd leads the handle (Intel's layout)
    return 0;
  }

  int import_buffer(const IpcHandle& in, uint64_t bytes, void** out, uint64_t* mapped) override {
    if (in.kind != 1 || in.fd < 0) return -EINVAL;
    ze_ipc_mem_handle_t h{};
    std::memcpy(h.data, in.data, sizeof h.data);
    std::memcpy(h.data, &in.fd, sizeof(int));  // our copy of the fd, received over the socket
    void* p = nullptr;
    if (ze_.zeMemOpenIpcHandle(ctx_, device_, h, 0, &p) != ZE_RESULT_SUCCESS) return -EINVAL;
    void* base = nullptr;
    size_t size = 0;
    if (ze_.zeMemGetAddressRange(ctx_, p, &base, &size) != ZE_RESULT_SUCCESS || size < bytes) {
      ze_.zeMemCloseIpcHandle(ctx_, p);
      return -EINVAL;  // smaller than the client claims
    }
    *out = p;
    *mapped = size;
    return 0;
  }

  void release_import(void* ptr) override { ze_.zeMemCloseIpcHandle(ctx_, ptr); }

  int open_event_pool(const IpcHandle& in, uint32_t count, uint64_t* id) override {
    if (in.kind != 1 || in.fd < 0 || count == 0 || count > 65536) return -EINVAL;
    ze_ipc_event_pool_handle_t h{};
    std::memcpy(h.data, in.data, sizeof h.data);
    std::memcpy(h.data, &in.fd, sizeof(int));
    ze_event_pool_handle_t pool = nullptr;
    if (ze_.zeEventPoolOpenIpcHandle(ctx_, h, &pool) != ZE_RESULT_SUCCESS) return -EINVAL;
    *id = ++next_pool_;
    client_pools_[*id] = ClientPool{pool, count, std::vector<ze_event_handle_t>(count, nullptr)};
    return 0;
  }

  void close_event_pool(uint64_t id) override {
    auto it = client_pools_.find(id);
    if (it == client_pools_.end()) return;
    for (auto* e : it->second.events)
      if (e != nullptr) ze_.zeEventDestroy(e);
    if (ze_.zeEventPoolCloseIpcHandle(it->second.pool) != ZE_RESULT_SUCCESS)
      FERRY_LOG(error, "the driver refused to close client event pool %llu", static_cast<unsigned long long>(id));
    client_pools_.erase(it);
  }

  void trim() override { events_.trim(); }

  bool lost() override { return ze_.zeDeviceGetStatus(device_) == ZE_RESULT_ERROR_DEVICE_LOST; }

  size_t reap(std::vector<Done>& out) override {
    return inflight_.reap(
        out, [&](ze_event_handle_t e) { return ze_.zeEventQueryStatus(e); },
        [](ze_result_t r) { return r != ZE_RESULT_NOT_READY; }, to_errno);
  }

  bool arm(int efd) override { return inflight_.arm(efd); }

 private:
  bool setup(std::string& why) {
    describe();
    ze_context_desc_t cd{ZE_STRUCTURE_TYPE_CONTEXT_DESC, nullptr, 0};
    if (ze_.zeContextCreate(driver_, &cd, &ctx_) != ZE_RESULT_SUCCESS) {
      why = "Level Zero: zeContextCreate failed";
      return false;
    }
    events_.open(ctx_, device_);
    const int ordinal = copy_ordinal();
    if (ordinal < 0) {
      why = "Level Zero: the device has no queue group that copies";
      return false;
    }
    ze_command_queue_desc_t qd{ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, nullptr, static_cast<uint32_t>(ordinal), 0, 0,
                               ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS, ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
    if (ze_.zeCommandListCreateImmediate(ctx_, device_, &qd, &list_) != ZE_RESULT_SUCCESS) {
      why = "Level Zero: zeCommandListCreateImmediate failed";
      return false;
    }
    find_extensions();
    return true;
  }

  // The device as status shows it: name, UUID, PCI address, driver, memory.
  void describe() {
    ze_device_properties_t dp{};
    dp.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
    ze_.zeDeviceGetProperties(device_, &dp);
    info_.backend = "level-zero";
    info_.name = dp.name;
    unsigned char id[16];
    static_assert(sizeof dp.uuid.id >= sizeof id);
    std::memcpy(id, dp.uuid.id, sizeof id);
    info_.uuid = format_uuid(id, "");
    // An extension (ZE_extension_pci_properties): the loader may lack it, a
    // driver may not support it.
    using pci_t = ze_result_t (*)(ze_device_handle_t, ze_pci_ext_properties_t*);
    if (auto pci = reinterpret_cast<pci_t>(dlsym(ze_.lib, "zeDevicePciGetPropertiesExt")); pci != nullptr) {
      ze_pci_ext_properties_t pp{};
      pp.stype = ZE_STRUCTURE_TYPE_PCI_EXT_PROPERTIES;
      if (pci(device_, &pp) == ZE_RESULT_SUCCESS)
        info_.pci_bus_id = format_pci_bus_id(pp.address.domain, pp.address.bus, pp.address.device, pp.address.function);
    }
    ze_driver_properties_t drp{};
    drp.stype = ZE_STRUCTURE_TYPE_DRIVER_PROPERTIES;
    ze_.zeDriverGetProperties(driver_, &drp);
    info_.driver = "Level Zero driver version " + std::to_string(drp.driverVersion);
    uint32_t nmem = 1;
    ze_device_memory_properties_t mp{};
    mp.stype = ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES;
    if (ze_.zeDeviceGetMemoryProperties(device_, &nmem, &mp) == ZE_RESULT_SUCCESS && nmem > 0)
      info_.memory_bytes = mp.totalSize;
  }

  // The queue group the uploads go to, or -1: a copy-only one where there is
  // one, so that uploads never queue behind kernels of other users of the
  // device; else any that copies.
  int copy_ordinal() {
    uint32_t ngroups = 0;
    ze_.zeDeviceGetCommandQueueGroupProperties(device_, &ngroups, nullptr);
    std::vector<ze_command_queue_group_properties_t> groups(ngroups);
    for (auto& g : groups) g.stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_GROUP_PROPERTIES;
    ze_.zeDeviceGetCommandQueueGroupProperties(device_, &ngroups, groups.data());
    for (uint32_t i = 0; i < ngroups; ++i) {
      const auto f = groups[i].flags;
      if ((f & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY) && !(f & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE)) {
        info_.copy_engine = true;
        return static_cast<int>(i);
      }
    }
    for (uint32_t i = 0; i < ngroups; ++i)
      if (groups[i].flags & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY) return static_cast<int>(i);
    return -1;
  }

  // The driver's extensions ferryd uses: host import, and the device's
  // write of each client's timeline (Intel's memory-sync extension, where
  // the segment can be registered for it).
  void find_extensions() {
    // Extension functions take the driver's own handle, not the loader's.
    native_driver_ = driver_;
    if (ze_.translate != nullptr)
      ze_.translate(ZEL_HANDLE_DRIVER, driver_, reinterpret_cast<void**>(&native_driver_));
    void* f = nullptr;
    if (ze_.zeDriverGetExtensionFunctionAddress(driver_, "zexDriverImportExternalPointer", &f) == ZE_RESULT_SUCCESS)
      import_ = reinterpret_cast<import_fn>(f);
    f = nullptr;
    if (ze_.zeDriverGetExtensionFunctionAddress(driver_, "zexDriverReleaseImportedPointer", &f) == ZE_RESULT_SUCCESS)
      release_ = reinterpret_cast<release_fn>(f);
    if (import_ == nullptr || release_ == nullptr) import_ = nullptr, release_ = nullptr;
    info_.host_import = import_ != nullptr;
    f = nullptr;
    if (import_ != nullptr &&
        ze_.zeDriverGetExtensionFunctionAddress(driver_, "zexCommandListAppendWriteToMemory", &f) == ZE_RESULT_SUCCESS)
      write_ = reinterpret_cast<write_fn>(f);
    native_list_ = list_;
    if (ze_.translate != nullptr)
      ze_.translate(ZEL_HANDLE_COMMAND_LIST, list_, reinterpret_cast<void**>(&native_list_));
    info_.device_writes = write_ != nullptr;
  }

  struct ClientPool {
    ze_event_pool_handle_t pool = nullptr;
    uint32_t count = 0;
    std::vector<ze_event_handle_t> events;  // created on first use
  };

  ze_event_handle_t pool_event(uint64_t id, uint32_t index) {
    auto it = client_pools_.find(id);
    if (it == client_pools_.end() || index >= it->second.count) return nullptr;
    ze_event_handle_t& e = it->second.events[index];
    if (e == nullptr) {
      ze_event_desc_t ed{ZE_STRUCTURE_TYPE_EVENT_DESC, nullptr, index, 0, 0};
      if (ze_.zeEventCreate(it->second.pool, &ed, &e) != ZE_RESULT_SUCCESS) e = nullptr;
    }
    return e;
  }

  Ze ze_;
  DeviceInfo info_;
  ze_driver_handle_t driver_ = nullptr;
  ze_driver_handle_t native_driver_ = nullptr;
  ze_device_handle_t device_ = nullptr;
  ze_context_handle_t ctx_ = nullptr;
  ze_command_list_handle_t list_ = nullptr;
  ze_command_list_handle_t native_list_ = nullptr;  // the driver's own handle, for extension calls
  write_fn write_ = nullptr;
  import_fn import_ = nullptr;
  release_fn release_ = nullptr;

  OwnEvents events_{ze_};
  // A bounded wait (stop() ends within it); an event goes back reset.
  InFlight<ze_event_handle_t> inflight_{
      [this](ze_event_handle_t e) { return ze_.zeEventHostSynchronize(e, 50'000'000) != ZE_RESULT_NOT_READY; },
      [this](ze_event_handle_t e) {
        ze_.zeEventHostReset(e);
        events_.give(e);
      }};
  std::map<uint64_t, ClientPool> client_pools_;
  uint64_t next_pool_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_level_zero_backend(uint32_t device, std::string& why) {
  auto b = std::make_unique<LevelZero>();
  if (!b->open(device, why)) return nullptr;
  return b;
}

}  // namespace ferry::ferryd
