// SPDX-License-Identifier: MIT
// Why a connection to ferryd's socket was refused by the file's permissions,
// said the same way by libferry (ferry_last_error) and ferryctl.
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "ferry/fdpass.hpp"

namespace ferry::proto {

std::string access_refusal(const std::string& path) {
  // Say what the socket file's mode and group really admit, and whether
  // this process is in that group (connecting needs write permission).
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return "not allowed to connect to " + path + " (its directory is closed to this user)";
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  const struct group* g = ::getgrgid(st.st_gid);
  const std::string group = g != nullptr ? std::string("group \"") + g->gr_name + "\"" : "gid " + std::to_string(st.st_gid);
  bool member = ::getegid() == st.st_gid;
  std::vector<gid_t> groups(static_cast<size_t>(std::max(0, ::getgroups(0, nullptr))));
  if (!groups.empty() && ::getgroups(static_cast<int>(groups.size()), groups.data()) >= 0)
    member = member || std::find(groups.begin(), groups.end(), st.st_gid) != groups.end();
  std::string s = "not allowed to connect to " + path + " (mode " + mode + ", " + group + "): ";
  if ((st.st_mode & S_IWGRP) == 0)
    return s + "the socket admits no group at all (" + group +
           " has no write permission): the daemon must be started with --socket-mode 0660 (ferryd's default, and "
           "ferryd@.socket's SocketMode)";
  if (member)
    return s + "this process is in " + group +
           ", yet is refused: another permission (its directory, or a security module) stands in the way";
  // root's own group: ferryd was started by root and given no group to serve
  // (nobody should join root's group to upload).
  if (st.st_gid == 0)
    return s + "the socket belongs to root's group, so ferryd serves root alone: start it with --socket-group "
               "GROUP (members of GROUP may connect; the packages use \"ferry\") or --socket-mode 0666 (anyone "
               "may), or use the daemon of the packages (/run/ferry/ferryd-N.sock)";
  return s + "ask to be added to " + group + " (then log in again)";
}

}  // namespace ferry::proto
