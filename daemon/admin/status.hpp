// SPDX-License-Identifier: MIT
// The status document (`ferryctl status --json`, schema in ferryctl(1)), the
// one-line summary systemd shows.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>

#include "admin/credentials.hpp"
#include "engine/engine.hpp"
#include "engine/stats.hpp"
#include "options.hpp"

namespace ferry::ferryd {

// What the status shows besides the engine: the server's counters.
struct StatusInputs {
  const TransferEngine& engine;
  const Options& options;
  const ServerStats& stats;
  std::map<uid_t, size_t> connections;  // open sessions by uid (net/users.hpp)
  // The net layer's own: sessions open, and users with a row (net/users.hpp).
  size_t sessions = 0, user_rows = 0;
};

// Every client for an admin, the viewer's own clients otherwise.
std::string status_json(const StatusInputs& in, const PeerCred& viewer);

// "N clients, busy/total slots in flight, M uploads" for systemd's STATUS=.
std::string status_line(const TransferEngine& engine);

}  // namespace ferry::ferryd
