// SPDX-License-Identifier: MIT
// The open sessions: started here, forgotten when they close, stopped
// together when the daemon stops. io thread only.
#pragma once

#include <memory>
#include <map>
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
  size_t size() const { return sessions_.size(); }
  const std::map<uid_t, size_t>& by_user() const { return by_uid_; }
  // Open sessions of one user (the peer's uid).
  size_t of_user(uid_t uid) const {
    auto it = by_uid_.find(uid);
    return it == by_uid_.end() ? 0 : it->second;
  }

 private:
  std::set<std::shared_ptr<Session>> sessions_;
  std::map<uid_t, size_t> by_uid_;
};

}  // namespace ferry::ferryd
