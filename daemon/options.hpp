// SPDX-License-Identifier: MIT
// ferryd's settings: every one is a command-line flag (and, later, a line of
// the configuration file).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace ferry::ferryd {

// Every bound on what clients may make ferryd hold, each defined here once.
// "Per user" counts every connection and client of one uid together, so
// more connections buy a user nothing. No user but an admin (root, ferryd's
// own user, --admin-group) may take more than user_share percent of a
// daemon-wide bound, so the rest stays for everyone else; kAdminSeats
// connections past max_connections admit only admins (status, metrics,
// drain, disconnect), whatever other users hold. Past a bound a request is
// refused (-EUSERS for clients, -EDQUOT for the rest) with a message naming
// the bound, whose it is and the flag that sets it.
struct Limits {
  uint32_t max_clients = 64;      // daemon-wide, clients (Hello done or under way)
  uint32_t max_connections = 0;   // daemon-wide, Hello or not; 0: max_clients + 64
  uint32_t user_share = 75;       // percent of a daemon-wide bound one user may take (admins: all)
  uint64_t user_memory = 0;       // device bytes one user's clients may hold together, 0 = no limit
  // With user_memory 0: this share (percent) of the device's memory; 0 and 100: no limit.
  uint32_t user_memory_percent = 50;
  uint32_t max_grants = 4096;       // per user: grants of its own buffers
  uint32_t max_opens = 4096;        // per user: buffers opened through grants
  uint32_t max_imports = 1024;      // per user: allocations of its own contexts handed in
  uint32_t max_event_pools = 256;   // per user: IPC event pools registered
  uint32_t max_buffers = 4096;      // per user: allocations held at once
  // Staging areas beyond the segments (direct uploads that outgrow their
  // client's staging), per user, in bytes; 0: no areas at all. The default
  // is resolved at start: an eighth of the host's memory, at most 4 GiB.
  uint64_t user_staging = UINT64_MAX;
  // Allocations of all users together; 0: with --sim, from the descriptor
  // limit (each simulated allocation holds a descriptor), else no bound.
  uint64_t max_buffers_total = 0;
  static constexpr uint32_t kAdminSeats = 8;
  // What one user who is no admin may take of a daemon-wide bound (at least 1).
  uint64_t share_of(uint64_t total) const {
    const uint64_t s = total * user_share / 100;
    return s != 0 ? s : 1;
  }
};

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
  Limits limits;
  double hello_seconds = 5.0;    // a connection that sent no Hello by then is closed
  unsigned socket_mode = 0660;
  std::string socket_group;      // group of the socket file; empty: the daemon's
  bool socket_perms_given = false;  // --socket-mode or --socket-group set: applied to a passed socket too
  std::string admin_group;       // members see every client in status; empty: root and the daemon's user only
  gid_t admin_gid = static_cast<gid_t>(-1);  // admin_group's, resolved once at start (Server)
  double drain_seconds = 5.0;    // on SIGTERM, how long in-flight copies may take
  // The poller serves submission rings and the device's completions without
  // sleeping until it found nothing to do for this long; 0: it never polls
  // (every ring entry then comes with a ring of the client's doorbell socket,
  // every finished copy with the device's eventfd).
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
