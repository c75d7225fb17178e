// SPDX-License-Identifier: MIT
// What every session is given: the engine, the settings, and the server's
// counters and state. Owned by the server; io thread only.
#pragma once

#include <functional>

#include "engine.hpp"
#include "options.hpp"
#include "stats.hpp"

namespace ferry::ferryd {

struct Context {
  TransferEngine& engine;
  const Options& options;
  ServerStats stats{};
  bool stopping = false;
  size_t hellos_pending = 0;  // Hellos waiting for their segment (they count as clients)  // no new clients; copies drain, then the sessions end
  std::function<void()> request_stop{};  // an orderly stop, as SIGTERM (ferryctl drain)
};

}  // namespace ferry::ferryd
