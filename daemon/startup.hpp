// SPDX-License-Identifier: MIT
// What ferryd does at start besides serving: opening the device it serves
// (the backend asked for, or the simulated device: --sim; or, with
// --fallback-sim, where this host has no Level Zero GPU driver at all, so
// that a service unit starts on any host), and its running marker.
#pragma once

#include <memory>
#include <string>

#include "device/backend.hpp"
#include "options.hpp"

namespace ferry::ferryd {

struct OpenedDevice {
  std::unique_ptr<Backend> backend;  // nullptr: failed, why says so
  std::string fallback;              // why the simulated device serves in place of a GPU; "" otherwise
};

// Called before any thread starts (it may fork a probe).
OpenedDevice open_device(const Options& o, std::string& why);

// Whether a daemon already listens on `socket` (it accepts a connection):
// then *why names it, with its pid where its running marker does, and says
// what to do. Asked before the device is opened: a second ferryd on the
// same socket goes at once, touching no GPU.
bool socket_served(const std::string& socket, std::string* why);

// --user-staging: a number of bytes, or "auto" (an eighth of the host's
// memory, at most 4 GiB). False for anything else.
bool parse_staging_bound(const std::string& text, uint64_t* bytes);

// The running marker (proto::running_marker_path): written whole (a new
// file renamed into place, never through a link) once ferryd listens,
// removed at exit while it still names this process.
class RunningMarker {
 public:
  explicit RunningMarker(std::string path);
  ~RunningMarker() { remove(); }
  RunningMarker(const RunningMarker&) = delete;
  RunningMarker& operator=(const RunningMarker&) = delete;
  void remove();

 private:
  std::string path_;
};

}  // namespace ferry::ferryd
