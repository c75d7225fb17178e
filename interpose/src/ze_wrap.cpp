// SPDX-License-Identifier: MIT
// The entries ferry-run's Level Zero driver puts in the real driver's tables:
// what they learn (drivers, contexts, immediate and regular lists, the
// program's own imports) and the staged copy (zeCommandListAppendMemoryCopy;
// on a regular list, with its close, reset and execute: ze_lists.hpp).
#include <ferry/ferry.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "lanes.hpp"
#include "policy.hpp"
#include "stage.hpp"
#include "ze_lists.hpp"
#include "ze_region.hpp"
#include "ze_shim.hpp"

namespace ferry::run {
namespace {

struct ListInfo {
  ze_context_handle_t ctx = nullptr;
  bool immediate = false;
};

// What the wrapped calls learned, for judging copies.
struct Known {
  std::shared_mutex mu;
  std::unordered_map<ze_command_list_handle_t, ListInfo> lists;
  std::unordered_map<ze_context_handle_t, ze_driver_handle_t> contexts;
  std::vector<ze_driver_handle_t> drivers;
  std::map<uintptr_t, uintptr_t> imported;  // start -> end of host ranges imported (zexDriverImportExternalPointer)
  std::map<ze_driver_handle_t, ImportFn> import_fn;
  std::map<ze_driver_handle_t, ReleaseFn> release_fn;
  std::map<ze_driver_handle_t, WriteFn> write_fn;
};
Known& known() {
  static Known k;
  return k;
}

ImportFn real_import = nullptr;
ReleaseFn real_release = nullptr;

// ---- the driver's extension functions, by driver
template <class Fn>
Fn extension(ze_driver_handle_t d, const char* name, std::map<ze_driver_handle_t, Fn>& cache) {
  {
    std::shared_lock lock(known().mu);
    if (auto it = cache.find(d); it != cache.end()) return it->second;
  }
  void* f = nullptr;
  if (real().driver.pfnGetExtensionFunctionAddress(d, name, &f) != ZE_RESULT_SUCCESS) f = nullptr;
  std::unique_lock lock(known().mu);
  cache[d] = reinterpret_cast<Fn>(f);
  return reinterpret_cast<Fn>(f);
}

}  // namespace

// ---- wrapped entries: what they learn
ze_result_t driver_get(uint32_t* count, ze_driver_handle_t* drivers) {
  const ze_result_t r = real().driver.pfnGet(count, drivers);
  if (r == ZE_RESULT_SUCCESS && drivers != nullptr) {
    std::unique_lock lock(known().mu);
    for (uint32_t i = 0; i < *count; ++i)
      if (std::find(known().drivers.begin(), known().drivers.end(), drivers[i]) == known().drivers.end())
        known().drivers.push_back(drivers[i]);
  }
  return r;
}

static ze_result_t import_wrapped(ze_driver_handle_t d, void* p, size_t n) {
  const ze_result_t r = real_import(d, p, n);
  if (r == ZE_RESULT_SUCCESS) {
    std::unique_lock lock(known().mu);
    known().imported[reinterpret_cast<uintptr_t>(p)] = reinterpret_cast<uintptr_t>(p) + n;
  }
  return r;
}

static ze_result_t release_wrapped(ze_driver_handle_t d, void* p) {
  const ze_result_t r = real_release(d, p);
  if (r == ZE_RESULT_SUCCESS) {
    std::unique_lock lock(known().mu);
    known().imported.erase(reinterpret_cast<uintptr_t>(p));
  }
  return r;
}

// The program's own imports count as pinned sources: they are handed its
// wrapped functions (ferry's own imports call the real ones directly).
ze_result_t driver_extension(ze_driver_handle_t d, const char* name, void** f) {
  const ze_result_t r = real().driver.pfnGetExtensionFunctionAddress(d, name, f);
  if (r != ZE_RESULT_SUCCESS || name == nullptr || f == nullptr || *f == nullptr) return r;
  if (std::strcmp(name, "zexDriverImportExternalPointer") == 0) {
    real_import = reinterpret_cast<ImportFn>(*f);
    *f = reinterpret_cast<void*>(&import_wrapped);
  } else if (std::strcmp(name, "zexDriverReleaseImportedPointer") == 0) {
    real_release = reinterpret_cast<ReleaseFn>(*f);
    *f = reinterpret_cast<void*>(&release_wrapped);
  }
  return r;
}

static void note_context(ze_driver_handle_t d, ze_context_handle_t* c, ze_result_t r) {
  if (r != ZE_RESULT_SUCCESS || c == nullptr) return;
  std::unique_lock lock(known().mu);
  known().contexts[*c] = d;
}

ze_result_t context_create(ze_driver_handle_t d, const ze_context_desc_t* desc, ze_context_handle_t* c) {
  const ze_result_t r = real().context.pfnCreate(d, desc, c);
  note_context(d, c, r);
  return r;
}

ze_result_t context_create_ex(ze_driver_handle_t d, const ze_context_desc_t* desc, uint32_t n,
                              ze_device_handle_t* devices, ze_context_handle_t* c) {
  const ze_result_t r = real().context.pfnCreateEx(d, desc, n, devices, c);
  note_context(d, c, r);
  return r;
}

ze_result_t context_destroy(ze_context_handle_t c) {
  ListStaging::get().context_gone(c);
  {
    std::unique_lock lock(known().mu);
    known().contexts.erase(c);
  }
  return real().context.pfnDestroy(c);
}

static void note_list(ze_command_list_handle_t* l, ze_context_handle_t c, bool immediate, ze_result_t r) {
  if (r != ZE_RESULT_SUCCESS || l == nullptr) return;
  std::unique_lock lock(known().mu);
  known().lists[*l] = ListInfo{c, immediate};
}

ze_result_t list_create(ze_context_handle_t c, ze_device_handle_t dev, const ze_command_list_desc_t* desc,
                        ze_command_list_handle_t* l) {
  const ze_result_t r = real().list.pfnCreate(c, dev, desc, l);
  note_list(l, c, false, r);
  return r;
}

ze_result_t list_create_immediate(ze_context_handle_t c, ze_device_handle_t dev, const ze_command_queue_desc_t* desc,
                                  ze_command_list_handle_t* l) {
  const ze_result_t r = real().list.pfnCreateImmediate(c, dev, desc, l);
  note_list(l, c, true, r);
  return r;
}

ze_result_t list_destroy(ze_command_list_handle_t l) {
  {
    std::unique_lock lock(known().mu);
    known().lists.erase(l);
  }
  ListStaging::get().forget(l);
  return real().list.pfnDestroy(l);
}

ze_result_t list_close(ze_command_list_handle_t l) { return ListStaging::get().close(l); }

ze_result_t list_reset(ze_command_list_handle_t l) {
  ListStaging::get().forget(l);
  return real().list.pfnReset(l);
}

ze_result_t queue_execute(ze_command_queue_handle_t q, uint32_t n, ze_command_list_handle_t* lists,
                          ze_fence_handle_t f) {
  return ListStaging::get().execute(q, n, lists, f);
}

// ---- judging a copy
static Mem classify(ze_context_handle_t ctx, const void* p) {
  ze_memory_allocation_properties_t props{};
  props.stype = ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES;
  ze_device_handle_t dev = nullptr;
  if (real().mem.pfnGetAllocProperties(ctx, p, &props, &dev) != ZE_RESULT_SUCCESS) return Mem::other;
  switch (props.type) {
    case ZE_MEMORY_TYPE_HOST: return Mem::pinned;
    case ZE_MEMORY_TYPE_DEVICE:
    case ZE_MEMORY_TYPE_SHARED: return Mem::device;
    case ZE_MEMORY_TYPE_UNKNOWN: break;
    default: return Mem::other;
  }
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::shared_lock lock(known().mu);
  auto it = known().imported.upper_bound(at);
  if (it != known().imported.begin() && at < std::prev(it)->second) return Mem::pinned;
  return Mem::pageable;
}

// ---- preparing a lane's client: its staging imported with the driver,
// and its staging areas as they come (ferry_set_staging_hooks)
static int attach_area(void* drv, void* area, uint64_t bytes) {
  auto d = static_cast<ze_driver_handle_t>(drv);
  ImportFn f = extension<ImportFn>(d, "zexDriverImportExternalPointer", known().import_fn);
  if (f == nullptr) return -ENOTSUP;
  return f(d, area, bytes) == ZE_RESULT_SUCCESS ? 0 : -EIO;
}

static void detach_area(void* drv, void* area, uint64_t) {
  auto d = static_cast<ze_driver_handle_t>(drv);
  if (ReleaseFn f = extension<ReleaseFn>(d, "zexDriverReleaseImportedPointer", known().release_fn)) f(d, area);
}

static int prepare(ferry_client* c, uint64_t key, void*) {
  auto d = reinterpret_cast<ze_driver_handle_t>(key);
  if (extension<WriteFn>(d, "zexCommandListAppendWriteToMemory", known().write_fn) == nullptr) return -ENOTSUP;
  ferry_timeline tl{};
  tl.size = sizeof tl;
  if (int r = ferry_get_timeline(c, &tl); r != 0) return r;
  if (int r = attach_area(d, tl.segment, tl.segment_bytes); r != 0) return r;
  // One driver's areas: a lane serves the lists of the driver it was
  // prepared for first (the usual case: one driver in the process).
  ferry_staging_hooks h{};
  h.size = sizeof h;
  h.ctx = d;
  h.attach = attach_area;
  h.detach = detach_area;
  return ferry_set_staging_hooks(c, &h);
}

// The lane goes (its copies all done): the segment's import goes first.
static void unprepare(ferry_client* c, uint64_t key, void*) {
  ferry_timeline tl{};
  tl.size = sizeof tl;
  if (ferry_get_timeline(c, &tl) == 0) detach_area(reinterpret_cast<void*>(key), tl.segment, tl.segment_bytes);
}

// ---- the staged copy: ferry_upload_direct's ops on an immediate list
namespace {
struct ZeCopy {
  ze_command_list_handle_t list;
  char* dst;
  uint64_t bytes;
  ze_event_handle_t signal;
  uint32_t waits;
  ze_event_handle_t* wait_events;
  ze_driver_handle_t drv;
  WriteFn write = nullptr;  // found by ze_before
  const RegionCopy* region = nullptr;  // a region copy's rows (bytes: its span), or a plain copy
  uint64_t appended = 0;  // copies appended so far
  uint64_t copied = 0;    // their bytes
  bool signalled = false;  // the program's event is on a barrier
  ze_result_t refused = ZE_RESULT_SUCCESS;
};
}  // namespace

// The first piece waits for the program's events, the last signals its
// event: the pieces between are ordered by the barriers before each write.
// The program's events go on barriers, not on copies: a staged upload may
// be several copies with no barrier between them (an area's), and commands
// of a list may overlap. Its wait events hold a barrier before the first
// copy, and its signal event is on the barrier after the last.
static int ze_copy(void* p, uint64_t off, const void* staging, uint64_t n) {
  auto* z = static_cast<ZeCopy*>(p);
  if (z->appended == 0 && z->waits != 0 &&
      real().list.pfnAppendBarrier(z->list, nullptr, z->waits, z->wait_events) != ZE_RESULT_SUCCESS)
    return -EIO;
  const ze_result_t r = z->region != nullptr ? append_rows(z->list, *z->region, off, static_cast<const char*>(staging), n)
                                             : real().list.pfnAppendMemoryCopy(z->list, z->dst + off, staging, n,
                                                                               nullptr, 0, nullptr);
  if (r != ZE_RESULT_SUCCESS) {
    if (z->refused == ZE_RESULT_SUCCESS) z->refused = r;
    return -EIO;
  }
  ++z->appended;
  z->copied += n;
  return 0;
}

// The driver's write-to-memory, found once the lane was prepared for it.
static int ze_before(ferry_client*, void* p) {
  auto* z = static_cast<ZeCopy*>(p);
  z->write = extension<WriteFn>(z->drv, "zexCommandListAppendWriteToMemory", known().write_fn);
  return z->write != nullptr ? 0 : -ENOTSUP;
}

static int ze_write(void* p, volatile uint64_t* word, uint64_t value) {
  auto* z = static_cast<ZeCopy*>(p);
  // The write comes after every copy before it; after the last one the
  // barrier signals the program's event too.
  const bool last = z->copied == z->bytes && !z->signalled;
  if (real().list.pfnAppendBarrier(z->list, last ? z->signal : nullptr, 0, nullptr) != ZE_RESULT_SUCCESS) return -EIO;
  z->signalled = z->signalled || last;
  WriteDesc desc{1u << 2};
  return z->write(z->list, &desc, const_cast<uint64_t*>(word), value) == ZE_RESULT_SUCCESS ? 0 : -EIO;
}

// What the policy needs to know of a copy on `list`, and the list's driver.
static Copy list_facts(ze_command_list_handle_t list, void* dst, const void* src, size_t size, uint64_t min_bytes,
                       ze_driver_handle_t* drv, ListInfo* out) {
  ListInfo info;
  {
    std::shared_lock lock(known().mu);
    auto it = known().lists.find(list);
    if (it != known().lists.end()) info = it->second;
    if (auto c = known().contexts.find(info.ctx); c != known().contexts.end()) *drv = c->second;
    if (*drv == nullptr && known().drivers.size() == 1) *drv = known().drivers.front();
  }
  Copy facts;
  facts.bytes = size;
  facts.min_bytes = min_bytes;
  facts.dst = classify(info.ctx, dst);
  facts.src = classify(info.ctx, src);
  // A list it never saw made (none should be) is judged unknown. A regular
  // list's copy is staged when the list executes, where its execute and
  // close are ferry-run's and the process has room for such copies.
  const bool regular_ok = real().have_queue && real().queue.pfnExecuteCommandLists != nullptr &&
                          real().list.pfnClose != nullptr && Lanes::get().settings().list_bytes > 0;
  facts.queue = info.ctx == nullptr                   ? FERRY_PASS_UNSUPPORTED
                : !info.immediate && !regular_ok      ? FERRY_PASS_REPLAYABLE
                : *drv == nullptr                     ? FERRY_PASS_UNSUPPORTED
                                                      : -1;
  *out = info;
  return facts;
}

// A copy on a regular list: staged when the list executes (ze_lists.hpp).
// `from` appends it from a block, or (nullptr) as the program asked.
static ze_result_t append_regular(ze_command_list_handle_t list, ze_context_handle_t ctx, ze_driver_handle_t drv,
                                  const Copy& facts, const void* src, ListStaging::From from) {
  Lanes& lanes = Lanes::get();
  const Verdict v = decide(facts);
  int why = v.why;
  if (v.stage) {
    why = FERRY_PASS_UNSUPPORTED;  // a driver that cannot write memory from a list
    if (WriteFn write = extension<WriteFn>(drv, "zexCommandListAppendWriteToMemory", known().write_fn)) {
      bool taken = false;
      const ze_result_t r = ListStaging::get().append(list, ctx, write, src, facts.bytes, from, &taken);
      if (taken) return r;  // counted as staged at each execution
      why = FERRY_PASS_NO_ROOM;
    }
  }
  lanes.passed(why, facts.bytes);
  return from.append(from.arg, nullptr);
}

// A copy on an immediate list, staged by libferry into its lane's staging
// and appended by `z`'s ops: whether it was (otherwise the reason is counted).
static bool append_staged(ze_command_list_handle_t list, ze_driver_handle_t drv, const Copy& facts,
                          const void* src, ZeCopy* z) {
  Queue q;
  q.id = reinterpret_cast<uint64_t>(list);
  q.context = 0;  // a list's handle names it in the whole process
  q.key = reinterpret_cast<uint64_t>(drv);
  q.prepare = prepare;
  q.unprepare = unprepare;
  q.connect_wait = Lanes::kConnectWaitUnsafe;
  ferry_direct_ops ops{};
  ops.flags = FERRY_DIRECT_NO_WAIT;
  ops.ctx = z;
  ops.copy = ze_copy;
  ops.write = ze_write;
  return stage(facts, q, src, ops, ze_before, z) == kStaged;
}

namespace {
struct PlainCopy {
  ze_command_list_handle_t list;
  void* dst;
  const void* src;
  size_t n;
  ze_event_handle_t signal;
  uint32_t waits;
  ze_event_handle_t* wait_events;
  static ze_result_t append(void* p, const char* block) {
    auto* c = static_cast<PlainCopy*>(p);
    return real().list.pfnAppendMemoryCopy(c->list, c->dst, block != nullptr ? block : c->src, c->n, c->signal,
                                           c->waits, c->wait_events);
  }
};
}  // namespace

ze_result_t append_copy(ze_command_list_handle_t list, void* dst, const void* src, size_t size,
                        ze_event_handle_t signal, uint32_t waits, ze_event_handle_t* wait_events) {
  PlainCopy plain{list, dst, src, size, signal, waits, wait_events};
  auto pass = [&](int why) {
    Lanes::get().passed(why, size);
    return PlainCopy::append(&plain, nullptr);
  };
  Lanes& lanes = Lanes::get();
  if (small(size, lanes.settings().ze_min_bytes) || dst == nullptr || src == nullptr) return pass(FERRY_PASS_SMALL);
  ze_driver_handle_t drv = nullptr;
  ListInfo info;
  const Copy facts = list_facts(list, dst, src, size, lanes.settings().ze_min_bytes, &drv, &info);
  if (!info.immediate && facts.queue == -1)
    return append_regular(list, info.ctx, drv, facts, src, ListStaging::From{&PlainCopy::append, &plain});
  ZeCopy z{list, static_cast<char*>(dst), size, signal, waits, wait_events, drv};
  if (append_staged(list, drv, facts, src, &z)) return ZE_RESULT_SUCCESS;
  // The driver refused the copy itself: what the call would have said.
  if (z.refused != ZE_RESULT_SUCCESS && z.appended == 0) return z.refused;
  // Nothing appended (no room now), or part of it: the driver's own copy,
  // in full, after whatever went before.
  return PlainCopy::append(&plain, nullptr);
}

namespace {
// The program's region copy, and its rows (ze_region.hpp).
struct RegionCall {
  ze_command_list_handle_t list;
  void* dst;
  const ze_copy_region_t* dr;
  uint32_t dst_pitch, dst_slice;
  const void* src;
  const ze_copy_region_t* sr;
  uint32_t src_pitch, src_slice;
  ze_event_handle_t signal;
  uint32_t waits;
  ze_event_handle_t* wait_events;
  RegionCopy rows;
  static ze_result_t append(void* p, const char* block) {
    auto* c = static_cast<RegionCall*>(p);
    if (block != nullptr) return append_region(c->list, c->rows, block, c->signal, c->waits, c->wait_events);
    return real().list.pfnAppendMemoryCopyRegion(c->list, c->dst, c->dr, c->dst_pitch, c->dst_slice, c->src, c->sr,
                                                 c->src_pitch, c->src_slice, c->signal, c->waits, c->wait_events);
  }
};
}  // namespace

// A region copy: its source's rows staged as one span (ze_region.hpp).
ze_result_t append_copy_region(ze_command_list_handle_t list, void* dst, const ze_copy_region_t* dr, uint32_t dst_pitch,
                               uint32_t dst_slice, const void* src, const ze_copy_region_t* sr, uint32_t src_pitch,
                               uint32_t src_slice, ze_event_handle_t signal, uint32_t waits,
                               ze_event_handle_t* wait_events) {
  RegionCall call{list, dst, dr, dst_pitch, dst_slice, src, sr, src_pitch, src_slice, signal, waits, wait_events, {}};
  Lanes& lanes = Lanes::get();
  // Nothing to stage, or a shape ferry leaves alone: the driver judges it.
  if (src == nullptr || !region_copy(dst, dr, dst_pitch, dst_slice, sr, src_pitch, src_slice, &call.rows)) {
    lanes.passed(FERRY_PASS_UNSUPPORTED, 0);
    return RegionCall::append(&call, nullptr);
  }
  const RegionCopy& rows = call.rows;
  // Rows far apart would stage mostly gaps: more than twice the rows' bytes
  // and a MiB is the driver's.
  if (const uint64_t payload = rows.width * rows.height * rows.depth; rows.span > 2 * payload + (1u << 20)) {
    lanes.passed(FERRY_PASS_UNSUPPORTED, payload);
    return RegionCall::append(&call, nullptr);
  }
  const char* from = static_cast<const char*>(src) + rows.start;
  if (small(rows.span, lanes.settings().ze_min_bytes)) {
    lanes.passed(FERRY_PASS_SMALL, rows.span);
    return RegionCall::append(&call, nullptr);
  }
  ze_driver_handle_t drv = nullptr;
  ListInfo info;
  const Copy facts = list_facts(list, dst, from, rows.span, lanes.settings().ze_min_bytes, &drv, &info);
  if (!info.immediate && facts.queue == -1)
    return append_regular(list, info.ctx, drv, facts, from, ListStaging::From{&RegionCall::append, &call});
  ZeCopy z{list, static_cast<char*>(dst), rows.span, signal, waits, wait_events, drv};
  z.region = &rows;
  if (append_staged(list, drv, facts, from, &z)) return ZE_RESULT_SUCCESS;
  // Not staged, or a copy of its rows refused (others may be on the list):
  // the driver's whole copy after it, and the driver's answer.
  return RegionCall::append(&call, nullptr);
}

}  // namespace ferry::run
