// SPDX-License-Identifier: MIT
// Copies on regular Level Zero command lists (create, append, close,
// execute: how oneAPI.jl and SYCL runtimes copy). The driver reads a
// pageable source when the list executes, and again at every execution.
// ferry-run keeps that meaning and removes the hazard: the list copies from
// a block of the driver's host memory that is the copy's own, and the block
// is filled from the source when the list is executed, before the execute
// call returns. The program may then reuse its source at once, as it may
// after a staged copy on an immediate list.
//
// The rules, each the driver's meaning kept:
// - The bytes copied are the source's at execute time, at every execution
//   (not the append's: a program may fill the source after the append).
// - The list learns when an execution's copies are done by a host-memory
//   word the device writes after them (appended at close). An execution
//   whose list still runs its last one waits for that first: its block is
//   refilled only once the device no longer reads it. (The one difference a
//   program can see: a list executed again while its last execution waits
//   on an event that the host signals only later blocks in the execute.)
// - A list named twice in one execute is executed in two calls, the second
//   after the first one's copies are done (each occurrence its own fill).
// - Reset and destroy give the blocks back once the last execution is done;
//   blocks of a list whose execution never ended (a lost device) are never
//   reused, nor those of a list whose context was destroyed (the driver
//   freed them with it).
// - A list whose close could not append the done write (the driver refused
//   it) is filled at every execute without waiting.
// - After fork() the child starts with no lists and no blocks (they are the
//   parent's context's).
// Blocks are the process's own pinned memory (zeMemAllocHost), at most
// Settings::list_bytes in all, free ones kept for reuse (a program that
// makes a list per upload allocates once); those unused for kIdle are freed
// when blocks next come back, a context's when it is destroyed. Past the
// bound a copy goes to the driver, counted as no_room. No ferryd is needed.
#pragma once

#include <level_zero/ze_api.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "ze_shim.hpp"

namespace ferry::run {

class ListStaging {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr auto kIdle = std::chrono::seconds(10);
  // How long reset and destroy wait for an execution still running.
  static constexpr auto kForgetWait = std::chrono::seconds(10);

  static ListStaging& get();

  // How a copy is appended once its block is there: from `block`, which
  // holds what the n bytes from the program's source will be. The driver's answer.
  struct From {
    ze_result_t (*append)(void* arg, const char* block);
    void* arg;
  };
  // Appends a copy that reads n bytes from the program's source (src) to
  // the regular list (of ctx), made by `from` from a block of its own: the
  // driver's answer, with *taken false when no block can be had (the caller
  // leaves the copy to the driver). `write` is the driver's write-to-memory.
  ze_result_t append(ze_command_list_handle_t list, ze_context_handle_t ctx, WriteFn write, const void* src,
                     size_t n, From from, bool* taken);
  // zeCommandListClose: a list with copies of ours gets the write that says
  // an execution's copies are done.
  ze_result_t close(ze_command_list_handle_t list);
  // zeCommandQueueExecuteCommandLists: every list's blocks filled from
  // their sources (once its last execution is done), then the driver's call.
  ze_result_t execute(ze_command_queue_handle_t q, uint32_t n, ze_command_list_handle_t* lists, ze_fence_handle_t f);
  // zeCommandListReset and zeCommandListDestroy: its blocks go back.
  void forget(ze_command_list_handle_t list);
  // zeContextDestroy: its free blocks are freed.
  void context_gone(ze_context_handle_t ctx);
  // Bytes of blocks made and not yet freed (for tests and the report).
  uint64_t bytes() const;

 private:
  struct Block {
    ze_context_handle_t ctx = nullptr;
    char* p = nullptr;
    uint64_t bytes = 0;
    Clock::time_point used{};
  };
  struct Copy {
    Block block;
    const void* src = nullptr;
    uint64_t n = 0;
  };
  // One list's copies and its done word (1: no execution running).
  // the word lies at the end of the first copy's block.
  struct List {
    std::mutex mu;
    ze_context_handle_t ctx = nullptr;
    WriteFn write = nullptr;
    std::vector<Copy> copies;
    volatile uint64_t* word = nullptr;
    std::atomic<bool> closed{false};  // closed with copies of ours: executes fill them
    bool watched = false;  // the done write is on it
    bool orphan = false;   // its context went: its blocks are not ours to give back
  };
  ListStaging() = default;
  // One execute call's lists, none of ours twice (ours: those to fill).
  ze_result_t execute_run(ze_command_queue_handle_t q, uint32_t n, ze_command_list_handle_t* lists,
                          ze_fence_handle_t f, std::vector<std::shared_ptr<List>> ours);
  std::shared_ptr<List> find(ze_command_list_handle_t list);
  // pool_mu_ taken inside: a free block of at least n bytes of ctx, or a new one.
  bool take(ze_context_handle_t ctx, uint64_t n, Block* out);
  void give(Block b);
  // pool_mu_ held: frees blocks unused for kIdle (every free one with `all`).
  void trim(bool all, ze_context_handle_t only = nullptr);
  // Until no execution of l runs, or `limit` (0: none) passed: whether none does.
  static bool wait_done(const List& l, Clock::duration limit);
  static void after_fork_child();

  mutable std::mutex lists_mu_;
  std::unordered_map<ze_command_list_handle_t, std::shared_ptr<List>> lists_;
  mutable std::mutex pool_mu_;
  std::vector<Block> free_;
  uint64_t made_ = 0;  // bytes allocated and not freed (free and in use)
};

}  // namespace ferry::run
