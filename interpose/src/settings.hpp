// SPDX-License-Identifier: MIT
// What ferry-run asked of the interposers in a process, read once from the
// environment it set (FERRY_RUN_*). A process started some other way with
// the interposers loaded gets the same defaults.
#pragma once

#include <cstdint>
#include <string>

namespace ferry::run {

struct Settings {
  // Copies below this many bytes go to the driver (FERRY_RUN_MIN_BYTES).
  // CUDA's driver stages a pageable copy of up to 2 MiB itself and returns
  // at once; there its path was as fast as ferry's or faster on the H200
  // (docs/BENCHMARKS.md), from one byte more it waits for the stream. Level
  // Zero reads the source when the copy runs, at any size: stage every one.
  uint64_t cuda_min_bytes = (2u << 20) + 1;
  uint64_t ze_min_bytes = 0;
  // Bytes of the driver's host memory that copies on regular Level Zero
  // command lists may be staged in, all lists of the process together
  // (FERRY_RUN_LIST_BYTES; 0: such copies go to the driver, as replayable).
  uint64_t list_bytes = 256ull << 20;
  // A staging area of this many bytes is made ahead for each CUDA lane, in
  // the background, once the program allocates device memory in a context
  // (FERRY_RUN_AHEAD_BYTES; 0: nothing readied ahead, the lane neither): the first upload behind a kernel then
  // finds its staging ready. Larger uploads grow theirs in the background
  // too, while the driver (or the lane's staging ring) takes the first.
  uint64_t ahead_bytes = 64ull << 20;
  // The daemon's socket (FERRY_SOCKET, as for any libferry client).
  std::string socket;
  // Clients (each one queue at a time) one process may make (FERRY_RUN_LANES).
  uint32_t max_lanes = 8;
  // How long, in ms, a copy waits for a client being connected before it
  // goes to the driver (FERRY_RUN_CONNECT_MS); -1: Lanes' own defaults.
  int64_t connect_ms = -1;
  // Where each process appends a line of its counts at exit (FERRY_RUN_REPORT).
  std::string report;
  // Off: every copy goes to the driver, counted as "error" (FERRY_RUN_OFF=1, for measuring).
  bool off = false;
  // Each process says on stderr what it staged and passed, at exit (FERRY_RUN_STATS=1).
  bool stats = false;
};

// Read from the environment (each call reads it again).
Settings settings_from_env();

}  // namespace ferry::run
