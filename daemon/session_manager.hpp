// The open sessions: started here, forgotten when they close, stopped
// together when the daemon stops. io thread only.
#pragma once

#include <memory>
#include <set>

namespace ferry::ferryd {

class Session;

class SessionManager {
 public:
  void start(const std::shared_ptr<Session>& s);
  // Called by a session once it closed.
  void closed(const std::shared_ptr<Session>& s);
  // Tells every session the daemon stops (Shutdown), then each closes once it is written.
  void shut_down_all();
  // Closes every session now.
  void stop_all();
  size_t size() const { return sessions_.size(); }

 private:
  std::set<std::shared_ptr<Session>> sessions_;
};

}  // namespace ferry::ferryd
