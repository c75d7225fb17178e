// SPDX-License-Identifier: MIT
#include "admin/credentials.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace ferry::ferryd {

PeerCred peer_cred(int fd) {
  PeerCred who;
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
    who.pid = cred.pid;
    who.uid = cred.uid;
    who.gid = cred.gid;
  }
  who.groups.resize(64);
  for (int tries = 0; tries < 4; ++tries) {
    len = static_cast<socklen_t>(who.groups.size() * sizeof(gid_t));
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, who.groups.data(), &len) == 0) {
      who.groups.resize(len / sizeof(gid_t));
      return who;
    }
    if (errno != ERANGE) break;
    who.groups.resize(len / sizeof(gid_t) + 1);  // len: what it needs
  }
  who.groups.clear();
  return who;
}

bool is_admin(const Options& o, const PeerCred& who) {
  if (who.uid == 0 || who.uid == ::geteuid()) return true;
  if (o.admin_gid == static_cast<gid_t>(-1)) return false;
  return who.gid == o.admin_gid || std::find(who.groups.begin(), who.groups.end(), o.admin_gid) != who.groups.end();
}

}  // namespace ferry::ferryd
