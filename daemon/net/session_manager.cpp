// SPDX-License-Identifier: MIT
#include "net/session_manager.hpp"


namespace ferry::ferryd {

void SessionManager::start(Session::socket_type socket, Context& ctx) {
  auto s = std::make_shared<Session>(std::move(socket), ctx, [this, &ctx](const std::shared_ptr<Session>& gone) {
    if (sessions_.erase(gone) != 0) ctx.users.session_closed(gone->uid);
  });
  sessions_.insert(s);
  ctx.users.session_opened(s->uid);
  s->start();
}

void SessionManager::shut_down_all() {
  auto all = sessions_;  // a session may close, and leave the set, while we go
  for (const auto& s : all) s->shut_down();
}

void SessionManager::stop_all() {
  auto all = sessions_;
  for (const auto& s : all) s->close();
}

}  // namespace ferry::ferryd
