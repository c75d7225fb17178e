// SPDX-License-Identifier: MIT
// Opening the device ferryd serves: the backend asked for, or the simulated
// device (--sim; or, with --fallback-sim, where this host has no Level Zero
// GPU driver at all, so that a service unit starts on any host).
#pragma once

#include <memory>
#include <string>

#include "backend.hpp"
#include "options.hpp"

namespace ferry::ferryd {

struct OpenedDevice {
  std::unique_ptr<Backend> backend;  // nullptr: failed, why says so
  std::string fallback;              // why the simulated device serves in place of a GPU; "" otherwise
};

// Called before any thread starts (it may fork a probe).
OpenedDevice open_device(const Options& o, std::string& why);

}  // namespace ferry::ferryd
