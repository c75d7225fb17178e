// SPDX-License-Identifier: MIT
// The status document (`ferryctl status --json`, schema in ferryctl(1)), the
// one-line summary systemd shows, and who may see every client.
#pragma once

#include <sys/types.h>

#include <string>

#include "context.hpp"

namespace ferry::ferryd {

// Root, the daemon's own user, and members of --admin-group.
bool is_admin(const Options& o, uid_t uid, gid_t gid);

// Every client for an admin, the viewer's own clients otherwise.
std::string status_json(const Context& ctx, uid_t viewer, gid_t viewer_gid);

// "N clients, busy/total slots in flight, M uploads" for systemd's STATUS=.
std::string status_line(const TransferEngine& engine);

}  // namespace ferry::ferryd
