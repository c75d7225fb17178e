// SPDX-License-Identifier: MIT
// Virtual and physical memory (zeVirtualMem*, zePhysicalMem*), residency and
// peer access: the rest of the 1.4 core for memory.
//
// A reservation is an inaccessible anonymous mapping (PROT_NONE), aligned to
// the page size the sim reports. Physical memory is a sealed memfd counted
// against the device's memory, as device allocations are. Mapping puts the
// memfd's pages over part of a reservation (MAP_FIXED, the protection its
// access attribute gives); unmapping puts inaccessible anonymous pages back.
// Access attributes are kept per page, mapped or not, so a query answers what
// was set, and only mapped pages change protection.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "api.hpp"
#include "sim.hpp"

namespace ferry::sim {

namespace {

constexpr size_t kPage = 64 << 10;  // what zeVirtualMemQueryPageSize reports

struct Reservation {
  size_t size = 0;
  std::vector<ze_memory_access_attribute_t> access;  // per page
  std::vector<bool> mapped;                          // per page
};

struct VirtualSpace {
  std::mutex mu;
  std::map<uintptr_t, Reservation> reservations;  // by base

  // The reservation holding [p, p+n), page-aligned, and the first page's index.
  Reservation* find(const void* ptr, size_t n, size_t* first) {
    const auto p = reinterpret_cast<uintptr_t>(ptr);
    auto it = reservations.upper_bound(p);
    if (it == reservations.begin()) return nullptr;
    --it;
    if (p - it->first > it->second.size || n > it->second.size - (p - it->first)) return nullptr;
    *first = (p - it->first) / kPage;
    return &it->second;
  }
};

VirtualSpace& space() {
  static VirtualSpace s;
  return s;
}

int prot_of(ze_memory_access_attribute_t a) {
  switch (a) {
    case ZE_MEMORY_ACCESS_ATTRIBUTE_READWRITE: return PROT_READ | PROT_WRITE;
    case ZE_MEMORY_ACCESS_ATTRIBUTE_READONLY: return PROT_READ;
    default: return PROT_NONE;
  }
}

bool aligned(const void* ptr, size_t n) {
  return n != 0 && reinterpret_cast<uintptr_t>(ptr) % kPage == 0 && n % kPage == 0;
}

void* inaccessible(void* at, size_t n, int extra_flags) {
  return mmap(at, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | extra_flags, -1, 0);
}

}  // namespace

struct PhysicalMem : Object {
  static constexpr Tag kTag = Tag::physical_mem;
  PhysicalMem() : Object(kTag) {}
  ~PhysicalMem() override {
    if (fd >= 0) close(fd);
    if (device != nullptr) device->device_bytes.fetch_sub(size);
  }
  Device* device = nullptr;
  int fd = -1;
  size_t size = 0;
};

// ---------------------------------------------------------------- virtual memory
ze_result_t zeVirtualMemQueryPageSize(ze_context_handle_t hc, ze_device_handle_t hd, size_t size, size_t* out) {
  if (get<Context>(hc) == nullptr || get<Device>(hd) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (out == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (size == 0) return ZE_RESULT_ERROR_UNSUPPORTED_SIZE;
  *out = kPage;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeVirtualMemReserve(ze_context_handle_t hc, const void* hint, size_t size, void** out) {
  if (get<Context>(hc) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (out == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (size == 0 || size % kPage != 0) return ZE_RESULT_ERROR_UNSUPPORTED_SIZE;
  if (size > config().device_memory * 16) return ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY;
  // The hint is taken where it is free and aligned; otherwise anywhere.
  void* at = hint != nullptr && reinterpret_cast<uintptr_t>(hint) % kPage == 0 ? const_cast<void*>(hint) : nullptr;
  void* p = inaccessible(at, size + kPage, 0);
  if (p == MAP_FAILED) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  // Trim to a page-aligned start (and size).
  const auto raw = reinterpret_cast<uintptr_t>(p);
  const uintptr_t base = (raw + kPage - 1) / kPage * kPage;
  if (base != raw) munmap(p, base - raw);
  if (const size_t tail = raw + size + kPage - (base + size); tail != 0) munmap(reinterpret_cast<void*>(base + size), tail);
  Reservation r;
  r.size = size;
  r.access.assign(size / kPage, ZE_MEMORY_ACCESS_ATTRIBUTE_NONE);
  r.mapped.assign(size / kPage, false);
  std::lock_guard lock(space().mu);
  space().reservations[base] = std::move(r);
  *out = reinterpret_cast<void*>(base);
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeVirtualMemFree(ze_context_handle_t hc, const void* ptr, size_t size) {
  if (get<Context>(hc) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (ptr == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  std::lock_guard lock(space().mu);
  auto it = space().reservations.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == space().reservations.end() || it->second.size != size) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  munmap(const_cast<void*>(ptr), size);  // mapped pages too: their memfd keeps its memory
  space().reservations.erase(it);
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeVirtualMemMap(ze_context_handle_t hc, const void* ptr, size_t size, ze_physical_mem_handle_t hp,
                            size_t offset, ze_memory_access_attribute_t access) {
  PhysicalMem* pm = get<PhysicalMem>(hp);
  if (get<Context>(hc) == nullptr || pm == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (ptr == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (access > ZE_MEMORY_ACCESS_ATTRIBUTE_READONLY) return ZE_RESULT_ERROR_INVALID_ENUMERATION;
  if (!aligned(ptr, size) || offset % kPage != 0) return ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT;
  if (offset > pm->size || size > pm->size - offset) return ZE_RESULT_ERROR_INVALID_SIZE;
  std::lock_guard lock(space().mu);
  size_t first = 0;
  Reservation* r = space().find(ptr, size, &first);
  if (r == nullptr) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  const size_t pages = size / kPage;
  for (size_t i = first; i < first + pages; ++i)
    if (r->mapped[i]) return ZE_RESULT_ERROR_INVALID_ARGUMENT;  // unmap first
  if (mmap(const_cast<void*>(ptr), size, prot_of(access), MAP_SHARED | MAP_FIXED, pm->fd, static_cast<off_t>(offset)) ==
      MAP_FAILED)
    return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  for (size_t i = first; i < first + pages; ++i) {
    r->mapped[i] = true;
    r->access[i] = access;
  }
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeVirtualMemUnmap(ze_context_handle_t hc, const void* ptr, size_t size) {
  if (get<Context>(hc) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (ptr == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (!aligned(ptr, size)) return ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT;
  std::lock_guard lock(space().mu);
  size_t first = 0;
  Reservation* r = space().find(ptr, size, &first);
  if (r == nullptr) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  if (inaccessible(const_cast<void*>(ptr), size, MAP_FIXED) == MAP_FAILED) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  for (size_t i = first; i < first + size / kPage; ++i) {
    r->mapped[i] = false;
    r->access[i] = ZE_MEMORY_ACCESS_ATTRIBUTE_NONE;
  }
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeVirtualMemSetAccessAttribute(ze_context_handle_t hc, const void* ptr, size_t size,
                                           ze_memory_access_attribute_t access) {
  if (get<Context>(hc) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (ptr == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (access > ZE_MEMORY_ACCESS_ATTRIBUTE_READONLY) return ZE_RESULT_ERROR_INVALID_ENUMERATION;
  if (!aligned(ptr, size)) return ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT;
  std::lock_guard lock(space().mu);
  size_t first = 0;
  Reservation* r = space().find(ptr, size, &first);
  if (r == nullptr) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  auto* base = static_cast<char*>(const_cast<void*>(ptr)) - first * kPage;
  for (size_t i = first; i < first + size / kPage; ++i) {
    r->access[i] = access;
    if (r->mapped[i] && mprotect(base + i * kPage, kPage, prot_of(access)) != 0)
      return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  }
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeVirtualMemGetAccessAttribute(ze_context_handle_t hc, const void* ptr, size_t size,
                                           ze_memory_access_attribute_t* access, size_t* out_size) {
  if (get<Context>(hc) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (ptr == nullptr || access == nullptr || out_size == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (!aligned(ptr, size)) return ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT;
  std::lock_guard lock(space().mu);
  size_t first = 0;
  Reservation* r = space().find(ptr, size, &first);
  if (r == nullptr) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  // The attribute at ptr, and how far from ptr (within size) it holds.
  *access = r->access[first];
  size_t i = first;
  while (i < first + size / kPage && r->access[i] == *access) ++i;
  *out_size = (i - first) * kPage;
  return ZE_RESULT_SUCCESS;
}

// ---------------------------------------------------------------- physical memory
ze_result_t zePhysicalMemCreate(ze_context_handle_t hc, ze_device_handle_t hd, ze_physical_mem_desc_t* desc,
                                ze_physical_mem_handle_t* out) {
  Device* d = get<Device>(hd);
  if (get<Context>(hc) == nullptr || d == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (desc == nullptr || out == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (desc->size == 0 || desc->size % kPage != 0) return ZE_RESULT_ERROR_UNSUPPORTED_SIZE;
  if (d->device_bytes.fetch_add(desc->size) + desc->size > config().device_memory) {
    d->device_bytes.fetch_sub(desc->size);
    return ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY;
  }
  auto pm = std::make_unique<PhysicalMem>();
  pm->device = d;  // counted from here: the destructor gives it back
  pm->size = desc->size;
  pm->fd = sealed_memfd("ferry-sim-physical", desc->size);
  if (pm->fd < 0) return ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY;
  *out = handle<ze_physical_mem_handle_t>(pm.release());
  return ZE_RESULT_SUCCESS;
}

ze_result_t zePhysicalMemDestroy(ze_context_handle_t hc, ze_physical_mem_handle_t hp) {
  PhysicalMem* pm = get<PhysicalMem>(hp);
  if (get<Context>(hc) == nullptr || pm == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  delete pm;  // pages still mapped keep the memfd's memory until unmapped
  return ZE_RESULT_SUCCESS;
}

// ---------------------------------------------------------------- residency and peers
ze_result_t zeContextMakeMemoryResident(ze_context_handle_t hc, ze_device_handle_t hd, void* ptr, size_t size) {
  if (get<Context>(hc) == nullptr || get<Device>(hd) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (ptr == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  return memory().check_range(ptr, size);  // one memory, always resident
}

ze_result_t zeContextEvictMemory(ze_context_handle_t hc, ze_device_handle_t hd, void* ptr, size_t size) {
  return ferry::sim::zeContextMakeMemoryResident(hc, hd, ptr, size);
}

ze_result_t zeDeviceGetP2PProperties(ze_device_handle_t h, ze_device_handle_t peer, ze_device_p2p_properties_t* p) {
  if (get<Device>(h) == nullptr || get<Device>(peer) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (p == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  // Every simulated device is the same host memory: each reaches the others'.
  p->flags = ZE_DEVICE_P2P_PROPERTY_FLAG_ACCESS | ZE_DEVICE_P2P_PROPERTY_FLAG_ATOMICS;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeDeviceCanAccessPeer(ze_device_handle_t h, ze_device_handle_t peer, ze_bool_t* value) {
  if (get<Device>(h) == nullptr || get<Device>(peer) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (value == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  *value = 1;
  return ZE_RESULT_SUCCESS;
}

}  // namespace ferry::sim
