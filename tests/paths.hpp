// SPDX-License-Identifier: MIT
// Where the build's programs are, found from the test program's own location
// so that a build folder still works after it was moved or carried elsewhere.
#pragma once

#include <unistd.h>

#include <climits>
#include <string>

namespace ferry::test {

// `rel` is relative to the top of the build folder, e.g. "daemon/ferryd".
inline std::string build_path(const char* rel) {
  char exe[PATH_MAX] = {};
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  std::string dir(exe, n > 0 ? static_cast<size_t>(n) : 0);
  dir = dir.substr(0, dir.rfind('/'));  // .../tests
  dir = dir.substr(0, dir.rfind('/'));  // the build folder
  return dir + "/" + rel;
}

}  // namespace ferry::test

// Programs the tests start (each a temporary: use within one expression).
#define FERRYD_PATH ::ferry::test::build_path("daemon/ferryd").c_str()
#define FERRYCTL_PATH ::ferry::test::build_path("tools/ferryctl").c_str()
#define IPC_PEER_PATH ::ferry::test::build_path("tests/sim_ipc_peer").c_str()
#define MULTI_UPLOAD_PATH ::ferry::test::build_path("examples/multi_upload").c_str()
