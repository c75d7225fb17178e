// SPDX-License-Identifier: MIT
// The engine: a thread that executes one queue's commands in order.
//
// A copy reads its source when it executes, not when it was appended: that is
// the behaviour of a real GPU reading a pageable source, and the hazard ferry
// exists to remove.
#include <pthread.h>
#include <sys/prctl.h>
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstring>

#include "ferry/sim.h"
#include "sim.hpp"

namespace ferry::sim {

Engine::Engine() : thread_([this] {
  // Named so tools (and ferry's benchmarks) can tell the simulated GPU's
  // time from its host process's own.
  pthread_setname_np(pthread_self(), "ze-sim-engine");
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);  // modelled costs are microseconds
  run();
}) {}

Engine::~Engine() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  stopping_ = true;  // a wait on memory that never comes true ends too
  cv_.notify_all();
  thread_.join();
}

void Engine::submit(std::vector<Command> cmds) {
  {
    std::lock_guard lock(mu_);
    for (auto& c : cmds) queue_.push(std::move(c));
    submitted_ += cmds.size();
  }
  cv_.notify_one();
}

void Engine::submit(Command c) {
  {
    std::lock_guard lock(mu_);
    queue_.push(std::move(c));
    ++submitted_;
  }
  cv_.notify_one();
}

bool Engine::drain(uint64_t timeout_ns) {
  std::unique_lock lock(mu_);
  const uint64_t target = submitted_;
  auto done = [&] { return executed_ >= target; };
  if (timeout_ns == UINT64_MAX) {
    idle_cv_.wait(lock, done);
    return true;
  }
  return idle_cv_.wait_for(lock, std::chrono::nanoseconds(timeout_ns), done);
}

void Engine::run() {
  bool lowered = false;
  for (;;) {
    Command c;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and nothing left
      c = queue_.pop();
    }
    if (!lowered && priority_.load(std::memory_order_relaxed) < 0) {
      setpriority(PRIO_PROCESS, 0, 10);  // Linux: this thread alone
      lowered = true;
    }
    execute(c);
    {
      std::lock_guard lock(mu_);
      ++executed_;
    }
    idle_cv_.notify_all();
  }
}

namespace {

uint64_t copy_cost(size_t bytes) {
  const CostModel& m = config().cost;
  uint64_t ns = m.latency_ns;
  if (m.bytes_per_ns > 0) ns += static_cast<uint64_t>(static_cast<double>(bytes) / m.bytes_per_ns);
  return ns;
}

void run_builtin(const Command& c) {
  switch (c.builtin) {
    case Builtin::busy:
      wait_until(now_ns() + c.args[0] * 1000);
      break;
    case Builtin::checksum: {
      uint64_t sum = ferry_sim_checksum(reinterpret_cast<const void*>(c.args[0]), c.args[1]);
      std::memcpy(reinterpret_cast<void*>(c.args[2]), &sum, sizeof sum);
      break;
    }
    case Builtin::fill:
      std::memset(reinterpret_cast<void*>(c.args[0]), static_cast<int>(c.args[2] & 0xff), c.args[1]);
      break;
  }
}

// Decides whether this copy is the one the fault injection names.
bool copy_fails() {
  Faults& f = faults();
  if (f.device_lost.load()) return true;
  uint64_t n = f.copies_executed.fetch_add(1) + 1;
  uint64_t at = f.fail_at.load();
  if (at == 0 || n != at) return false;
  if (f.lose_device.load()) f.device_lost = true;
  return true;
}

// Whether the word compares to `value` as the ZEX_WAIT_ON_MEMORY_FLAG_* bits say
// (any one bit that holds is enough).
bool memory_condition(const Command& c) {
  uint64_t v;
  if (c.wait_bytes == 4) {
    v = __atomic_load_n(static_cast<const uint32_t*>(c.dst), __ATOMIC_ACQUIRE);
  } else {
    v = __atomic_load_n(static_cast<const uint64_t*>(c.dst), __ATOMIC_ACQUIRE);
  }
  const uint64_t d = c.value;
  const uint32_t f = c.wait_flags;
  return ((f & 1u) && v == d) || ((f & 2u) && v != d) || ((f & 4u) && v > d) || ((f & 8u) && v >= d) ||
         ((f & 16u) && v < d) || ((f & 32u) && v <= d);
}

}  // namespace

void Engine::execute(Command& c) {
  bool failed = false;
  for (Event* e : c.waits) {
    if (e->wait(UINT64_MAX) == kFailed) failed = true;
  }
  // Priorities among a device's engines: high runs first, low lets it.
  std::atomic<int>* high = high_running_.load(std::memory_order_relaxed);
  const int priority = priority_.load(std::memory_order_relaxed);
  struct HighScope {
    std::atomic<int>* n;
    ~HighScope() {
      if (n != nullptr) n->fetch_sub(1);
    }
  } high_scope{priority > 0 ? high : nullptr};
  if (high_scope.n != nullptr) high_scope.n->fetch_add(1);
  if (priority < 0 && high != nullptr) {
    // Engines released by the same event wake in any order: give the
    // high-priority ones a moment to start, then wait for them (bounded).
    for (int i = 0; i < 3; ++i) sched_yield();
    const uint64_t until = now_ns() + 1'000'000;
    while (high->load() > 0 && now_ns() < until) sched_yield();
  }
  const uint64_t start = now_ns();
  switch (c.op) {
    case Command::Op::copy:
      if (copy_fails()) {
        failed = true;
        break;
      }
      // The bytes land after the latency, within the modelled duration: a
      // reader of the destination before then sees what was there.
      wait_until(start + config().cost.latency_ns);
      std::memmove(c.dst, c.src, c.bytes);
      wait_until(start + copy_cost(c.bytes));
      break;
    case Command::Op::fill:
      if (faults().device_lost.load()) {
        failed = true;
        break;
      }
      for (size_t off = 0; off < c.bytes; off += c.pattern.size()) {
        size_t n = std::min(c.pattern.size(), c.bytes - off);
        std::memcpy(static_cast<char*>(c.dst) + off, c.pattern.data(), n);
      }
      wait_until(start + copy_cost(c.bytes));
      break;
    case Command::Op::kernel:
      if (faults().device_lost.load()) {
        failed = true;
        break;
      }
      run_builtin(c);
      wait_until(start + config().cost.latency_ns);
      break;
    case Command::Op::reset:
      if (c.signal != nullptr) c.signal->state().store(kClear, std::memory_order_release);
      return;
    case Command::Op::fence:
      c.fence->state.store(1, std::memory_order_release);
      return;
    case Command::Op::write_mem:
      // Never after a failed command: a queue that faulted claims no more
      // progress (as a real device's would not), so a word that says "done"
      // is true.
      if (faults().device_lost.load()) {
        failed = true;
        break;
      }
      if (faulted_) break;  // skipped, not failed: the copies around it report for themselves
      __atomic_store_n(static_cast<uint64_t*>(c.dst), c.value, __ATOMIC_RELEASE);
      break;
    case Command::Op::timestamp:
      if (faults().device_lost.load()) {
        failed = true;
        break;
      }
      // Written when this command runs, after everything before it on the list.
      __atomic_store_n(static_cast<uint64_t*>(c.dst), now_ns(), __ATOMIC_RELEASE);
      break;
    case Command::Op::wait_mem:
      // Holds only this queue: spin briefly, then poll with short sleeps.
      for (uint64_t spins = 0; !memory_condition(c) && !stopping_.load(std::memory_order_relaxed); ++spins) {
        if (spins > 2000) wait_until(now_ns() + 5'000);
      }
      break;
    case Command::Op::query_timestamps:
      if (faults().device_lost.load()) {
        failed = true;
        break;
      }
      for (size_t i = 0; i < c.extra->queried.size(); ++i) {
        const EventSlot& slot = c.extra->queried[i]->pool->slots[c.extra->queried[i]->index];
        ze_kernel_timestamp_result_t r{};
        r.global.kernelStart = r.context.kernelStart = __atomic_load_n(&slot.started_ns, __ATOMIC_RELAXED);
        r.global.kernelEnd = r.context.kernelEnd = __atomic_load_n(&slot.ended_ns, __ATOMIC_RELAXED);
        std::memcpy(c.extra->stamps[i], &r, sizeof r);
      }
      break;
    case Command::Op::kernels_indirect: {
      if (faults().device_lost.load()) {
        failed = true;
        break;
      }
      // The count is read when the command runs, as a device reads it.
      const Command::Extra& x = *c.extra;
      const uint32_t n = std::min<uint64_t>(__atomic_load_n(x.count_word, __ATOMIC_ACQUIRE), x.kernels.size());
      for (uint32_t i = 0; i < n; ++i) {
        Command k;
        k.builtin = x.kernels[i].builtin;
        std::memcpy(k.args, x.kernels[i].args, sizeof k.args);
        run_builtin(k);
      }
      wait_until(start + config().cost.latency_ns);
      break;
    }
    case Command::Op::signal:
    case Command::Op::barrier:
      break;
  }
  // An event reports the failure of any command since the last event: a
  // barrier after a failed copy fails too.
  if (failed) pending_failure_ = faulted_ = true;
  if (c.signal != nullptr) {
    const uint32_t state = pending_failure_ ? kFailed : kSignaled;
    // Kernel timestamps only where the pool keeps them: a clock read less per command elsewhere.
    if (c.signal->pool->kernel_timestamps) {
      c.signal->signal(state, start, now_ns());
    } else {
      c.signal->signal(state);
    }
    pending_failure_ = false;
  }
}

ze_result_t append(CmdList* list, Command c, uint32_t nwait, ze_event_handle_t* waits) {
  if (nwait > 0 && waits == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  for (uint32_t i = 0; i < nwait; ++i) {
    Event* e = get<Event>(waits[i]);
    if (e == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    c.waits.push_back(e);
  }
  if (list->engine) {
    list->engine->submit(std::move(c));
    // Synchronous immediate lists: the append returns once the command ran,
    // so the caller may free or read its memory right after.
    if (list->synchronous) list->engine->drain(UINT64_MAX);
    return ZE_RESULT_SUCCESS;
  }
  std::lock_guard lock(list->mu);
  if (list->closed) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  list->recorded.push_back(std::move(c));
  return ZE_RESULT_SUCCESS;
}

}  // namespace ferry::sim
