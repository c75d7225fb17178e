// SPDX-License-Identifier: MIT
// ferryd's settings: every one is a command-line flag (and, later, a line of
// the configuration file).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace ferry::ferryd {

struct Options {
  uint32_t device = 0;
  std::string socket;            // empty: $FERRY_SOCKET or /run/ferry/ferryd-<device>.sock
  std::string backend = "level-zero";
  bool sim = false;
  // Serve the simulated device where the host has no Level Zero GPU driver at
  // all (the level-zero backend), rather than fail: a unit starts anywhere.
  bool fallback_sim = true;
  uint64_t sim_memory = 0;       // the simulated device's memory; 0: its default (half the host's available)
  uint64_t slot_bytes = 1u << 20;
  uint32_t slots = 16;           // per client
  uint32_t max_clients = 64;
  uint32_t max_connections = 0;  // sessions at once, Hello or not; 0: max_clients + 64
  double hello_seconds = 5.0;    // a connection that sent no Hello by then is closed
  uint64_t client_memory = 0;    // device bytes one client may hold, 0 = no limit
  // With client_memory 0: this share (percent) of the device's memory; 0 and 100: no limit.
  uint32_t client_memory_percent = 50;
  // What else one client may make the daemon hold (-EDQUOT past it).
  uint32_t max_grants = 1024;       // grants of its own buffers
  uint32_t max_opens = 1024;        // buffers it opened through grants
  uint32_t max_imports = 256;       // allocations of its own context it handed in
  uint32_t max_event_pools = 64;    // IPC event pools it registered
  uint32_t max_buffers = 1024;      // allocations it holds at once
  // Allocations of all clients together; 0: with --sim, from the descriptor
  // limit (each simulated allocation holds a descriptor), else no bound.
  uint64_t max_buffers_total = 0;
  unsigned socket_mode = 0660;
  std::string socket_group;      // group of the socket file; empty: the daemon's
  std::string admin_group;       // members see every client in status; empty: root and the daemon's user only
  double drain_seconds = 5.0;    // on SIGTERM, how long in-flight copies may take
  // The poller serves submission rings and the device's completions without
  // sleeping until it found nothing to do for this long; 0: it never polls
  // (every ring entry then comes with a Doorbell, completions through the
  // retire thread).
  uint32_t poll_idle_us = 50;
  // While the device holds 4 or more copies and the rings are quiet, the
  // poller naps this long per queued copy (at most 50 µs) instead of
  // spinning; 0: it never naps.
  uint32_t poll_nap_us = 3;
  // Staging segments of the default geometry kept ready by a thread of their
  // own, so that a Hello costs the io thread no segment creation; 0: none.
  uint32_t segment_pool = 2;
};

}  // namespace ferry::ferryd
