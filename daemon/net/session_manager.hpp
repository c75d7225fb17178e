// SPDX-License-Identifier: MIT
// The open sessions: started here, forgotten when they close, stopped
// together when the daemon stops; each user's count of them is Users'.
// io thread only.
#pragma once

#include <memory>
#include <set>

#include "net/session.hpp"

namespace ferry::ferryd {

class SessionManager {
 public:
  // A session for a new connection, started and kept until it closes.
  void start(Session::socket_type socket, Context& ctx);
  // Tells every session the daemon stops (Shutdown), then each closes once it is written.
  void shut_down_all();
  // Closes every session now.
  void stop_all();

 private:
  std::set<std::shared_ptr<Session>> sessions_;
};

}  // namespace ferry::ferryd
