#include "session_manager.hpp"

#include "session.hpp"

namespace ferry::ferryd {

void SessionManager::start(const std::shared_ptr<Session>& s) {
  sessions_.insert(s);
  s->start();
}

void SessionManager::closed(const std::shared_ptr<Session>& s) { sessions_.erase(s); }

void SessionManager::shut_down_all() {
  auto all = sessions_;  // a session may close, and leave the set, while we go
  for (const auto& s : all) s->shut_down();
}

void SessionManager::stop_all() {
  auto all = sessions_;
  for (const auto& s : all) s->close();
}

}  // namespace ferry::ferryd
