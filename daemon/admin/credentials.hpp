// SPDX-License-Identifier: MIT
// Who a peer is, and the one rule of who is an admin: the only file that
// reads a socket's credentials or decides a peer's rights over others.
#pragma once

#include <sys/types.h>

#include <vector>

#include "options.hpp"

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

}  // namespace ferry::ferryd
