// SPDX-License-Identifier: MIT
#include "ze_lists.hpp"

#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <cstring>

#include "lanes.hpp"

namespace ferry::run {

namespace {
constexpr uint64_t kWordBytes = 64;        // the done word's room, at the end of a list's first block
constexpr uint64_t kGranule = 64 * 1024;   // blocks are made in multiples of this
constexpr uint64_t kDone = 1;              // the word's value while no execution runs

uint64_t load(const volatile uint64_t* w) { return __atomic_load_n(const_cast<const uint64_t*>(w), __ATOMIC_ACQUIRE); }
void store(volatile uint64_t* w, uint64_t v) { __atomic_store_n(const_cast<uint64_t*>(w), v, __ATOMIC_RELEASE); }

std::atomic<ListStaging*> current{nullptr};
}  // namespace

ListStaging& ListStaging::get() {
  if (ListStaging* s = current.load(std::memory_order_acquire)) return *s;
  static ListStaging* first = [] {
    auto* s = new ListStaging();  // never destroyed: lists may run until the very end
    current.store(s, std::memory_order_release);
    pthread_atfork(nullptr, nullptr, &ListStaging::after_fork_child);
    return s;
  }();
  return *first;
}

// The parent's lists and blocks belong to its contexts: the child starts
// anew (the old state, whose locks another thread may have held, is left).
void ListStaging::after_fork_child() { current.store(new ListStaging(), std::memory_order_release); }

std::shared_ptr<ListStaging::List> ListStaging::find(ze_command_list_handle_t list) {
  std::lock_guard lock(lists_mu_);
  auto it = lists_.find(list);
  return it == lists_.end() ? nullptr : it->second;
}

// ---- the blocks
bool ListStaging::take(ze_context_handle_t ctx, uint64_t n, Block* out) {
  std::lock_guard lock(pool_mu_);
  // The smallest free block that fits and wastes at most its own size.
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it)
    if (it->ctx == ctx && it->bytes >= n && it->bytes <= 2 * n + kGranule && (best == free_.end() || it->bytes < best->bytes))
      best = it;
  if (best != free_.end()) {
    *out = *best;
    free_.erase(best);
    return true;
  }
  const uint64_t bytes = (n + kGranule - 1) / kGranule * kGranule;
  const uint64_t bound = Lanes::get().settings().list_bytes;
  if (made_ + bytes > bound) trim(true);  // free blocks of other sizes give way first
  if (made_ + bytes > bound) return false;
  ze_host_mem_alloc_desc_t desc{ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC, nullptr, 0};
  void* p = nullptr;
  if (real().mem.pfnAllocHost(ctx, &desc, bytes, 64, &p) != ZE_RESULT_SUCCESS || p == nullptr) return false;
  made_ += bytes;
  *out = Block{ctx, static_cast<char*>(p), bytes, Clock::now()};
  return true;
}

void ListStaging::give(Block b) {
  if (b.p == nullptr) return;
  std::lock_guard lock(pool_mu_);
  b.used = Clock::now();
  free_.push_back(b);
  trim(false);
}

void ListStaging::trim(bool all, ze_context_handle_t only) {
  const auto now = Clock::now();
  auto keep = [&](const Block& b) {
    if (only != nullptr ? b.ctx != only : !all && now - b.used < kIdle) return true;
    if (only == nullptr) real().mem.pfnFree(b.ctx, b.p);  // a context going frees its memory itself
    made_ -= b.bytes;
    return false;
  };
  free_.erase(std::stable_partition(free_.begin(), free_.end(), keep), free_.end());
}

void ListStaging::context_gone(ze_context_handle_t ctx) {
  // Its lists' blocks go with it: never given back, no longer counted.
  uint64_t gone = 0;
  {
    std::lock_guard lock(lists_mu_);
    for (auto& [handle, l] : lists_) {
      std::lock_guard ll(l->mu);
      if (l->ctx != ctx || l->orphan) continue;
      l->orphan = true;
      for (const Copy& c : l->copies) gone += c.block.bytes;
    }
  }
  std::lock_guard lock(pool_mu_);
  made_ -= gone;
  trim(false, ctx);
}

uint64_t ListStaging::bytes() const {
  std::lock_guard lock(pool_mu_);
  return made_;
}

// ---- the list's calls
ze_result_t ListStaging::append(ze_command_list_handle_t list, ze_context_handle_t ctx, WriteFn write,
                                const void* src, size_t n, From from, bool* taken) {
  *taken = false;
  std::shared_ptr<List> l;
  {
    std::lock_guard lock(lists_mu_);
    auto& slot = lists_[list];
    if (slot == nullptr) slot = std::make_shared<List>();
    l = slot;
  }
  std::lock_guard lock(l->mu);
  if (l->closed || l->orphan || (l->ctx != nullptr && l->ctx != ctx)) return ZE_RESULT_SUCCESS;  // the driver's to judge
  const bool first = l->word == nullptr;
  const uint64_t room = (n + kWordBytes - 1) / kWordBytes * kWordBytes;
  Copy c;
  if (!take(ctx, first ? room + kWordBytes : n, &c.block)) return ZE_RESULT_SUCCESS;
  c.src = src;
  c.n = n;
  const ze_result_t r = from.append(from.arg, c.block.p);
  *taken = true;  // the driver's answer is the call's, either way
  if (r != ZE_RESULT_SUCCESS) {
    give(c.block);
    return r;
  }
  if (first) {
    l->word = reinterpret_cast<volatile uint64_t*>(c.block.p + room);
    store(l->word, kDone);
    l->ctx = ctx;
    l->write = write;
  }
  l->copies.push_back(c);
  return r;
}

ze_result_t ListStaging::close(ze_command_list_handle_t list) {
  if (std::shared_ptr<List> l = find(list)) {
    std::lock_guard lock(l->mu);
    if (!l->copies.empty() && !l->closed) {
      // After every command before it, the device writes kDone. A driver
      // that refuses it: the list is filled at every execute, unwatched.
      WriteDesc desc{1u << 2};
      l->watched = real().list.pfnAppendBarrier(list, nullptr, 0, nullptr) == ZE_RESULT_SUCCESS &&
                   l->write(list, &desc, const_cast<uint64_t*>(l->word), kDone) == ZE_RESULT_SUCCESS;
      const ze_result_t r = real().list.pfnClose(list);
      l->closed = r == ZE_RESULT_SUCCESS;
      return r;
    }
  }
  return real().list.pfnClose(list);
}

bool ListStaging::wait_done(const List& l, Clock::duration limit) {
  if (!l.watched || load(l.word) == kDone) return true;
  const auto until = Clock::now() + limit;
  for (long ns = 1000; load(l.word) != kDone; ns = std::min(ns * 2, 1'000'000L)) {
    if (limit != Clock::duration::zero() && Clock::now() > until) return false;
    if (ns < 16'000) {
      sched_yield();
    } else {
      timespec t{0, ns};
      nanosleep(&t, nullptr);
    }
  }
  return true;
}

ze_result_t ListStaging::execute(ze_command_queue_handle_t q, uint32_t n, ze_command_list_handle_t* lists,
                                 ze_fence_handle_t f) {
  if (lists == nullptr || n == 0) return real().queue.pfnExecuteCommandLists(q, n, lists, f);
  // The call in runs that name none of ours twice, in order (the queue
  // runs them in order either way); the fence goes on the last.
  uint32_t from = 0;
  std::vector<std::shared_ptr<List>> ours;
  for (uint32_t i = 0; i <= n; ++i) {
    std::shared_ptr<List> l = i < n ? find(lists[i]) : nullptr;
    if (l != nullptr && !l->closed) l = nullptr;
    const bool again = l != nullptr && std::find(ours.begin(), ours.end(), l) != ours.end();
    if (i == n || again) {
      const ze_result_t r = execute_run(q, i - from, lists + from, i == n ? f : nullptr, std::move(ours));
      if (r != ZE_RESULT_SUCCESS || i == n) return r;
      ours.clear();
      from = i;
    }
    if (l != nullptr) ours.push_back(std::move(l));
  }
  return ZE_RESULT_SUCCESS;  // not reached
}

ze_result_t ListStaging::execute_run(ze_command_queue_handle_t q, uint32_t n, ze_command_list_handle_t* lists,
                                     ze_fence_handle_t f, std::vector<std::shared_ptr<List>> ours) {
  if (ours.empty()) return real().queue.pfnExecuteCommandLists(q, n, lists, f);
  std::sort(ours.begin(), ours.end());  // locked in one order by every thread
  // Held through the driver's call: a second execute of the same list (on
  // another thread) sees the word this one cleared.
  std::vector<std::unique_lock<std::mutex>> held;
  for (auto& l : ours) {
    held.emplace_back(l->mu);
    if (l->orphan || !l->closed) continue;  // its context went, or it was reset or destroyed meanwhile
    wait_done(*l, Clock::duration::zero());  // the last execution's copies read the blocks until then
    if (l->watched) store(l->word, 0);
    for (const Copy& c : l->copies) std::memcpy(c.block.p, c.src, c.n);
  }
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  const ze_result_t r = real().queue.pfnExecuteCommandLists(q, n, lists, f);
  Lanes& lanes = Lanes::get();
  for (auto& l : ours) {
    if (l->orphan || !l->closed) continue;
    if (r != ZE_RESULT_SUCCESS) {
      if (l->watched) store(l->word, kDone);  // nothing runs
      continue;
    }
    for (const Copy& c : l->copies) lanes.staged(c.n);
  }
  return r;
}

void ListStaging::forget(ze_command_list_handle_t list) {
  std::shared_ptr<List> l;
  {
    std::lock_guard lock(lists_mu_);
    auto it = lists_.find(list);
    if (it == lists_.end()) return;
    l = std::move(it->second);
    lists_.erase(it);
  }
  std::lock_guard lock(l->mu);
  l->closed = false;  // an execute that still finds it fills nothing
  if (l->orphan || !wait_done(*l, kForgetWait)) return;  // still read, or never to be: not reused
  for (Copy& c : l->copies) give(c.block);
}

}  // namespace ferry::run
