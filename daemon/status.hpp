// SPDX-License-Identifier: MIT
// The status document (`ferryctl status --json`, schema in ferryctl(1)), the
// one-line summary systemd shows, and who may see every client.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "context.hpp"

namespace ferry::ferryd {

// Who is at the other end of a Unix socket, as the kernel recorded it at
// connect(): SO_PEERCRED and SO_PEERGROUPS (its supplementary groups).
struct PeerCred {
  pid_t pid = 0;
  uid_t uid = static_cast<uid_t>(-1);
  gid_t gid = static_cast<gid_t>(-1);
  std::vector<gid_t> groups;
};
PeerCred peer_cred(int fd);

// Root, the daemon's own user, and members of --admin-group (its gid the
// peer's group or one of its supplementary groups, as the kernel checks a
// socket's group: no name service is asked).
bool is_admin(const Options& o, const PeerCred& who);

// Every client for an admin, the viewer's own clients otherwise.
std::string status_json(const Context& ctx, const PeerCred& viewer);

// "N clients, busy/total slots in flight, M uploads" for systemd's STATUS=.
std::string status_line(const TransferEngine& engine);

}  // namespace ferry::ferryd
