// SPDX-License-Identifier: MIT
// What each user holds of the net layer, counted in one place: its open
// sessions (connections), its Hellos waiting for their segment (they count
// as clients, Limits), and the replies its sessions' peers have not read yet
// (bytes, and descriptors in flight, which count against ferryd's own
// descriptor limit). What its clients hold of the device is the engine's
// (Resources::usage). io thread only.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>

namespace ferry::ferryd {

class Users {
 public:
  struct Row {
    size_t sessions = 0;
    size_t hellos = 0;
    int64_t unread_bytes = 0, unread_fds = 0;
    bool empty() const { return sessions == 0 && hellos == 0 && unread_bytes == 0 && unread_fds == 0; }
  };
  // Unread replies are bounded per user, not per session, so that more
  // connections buy a user nothing (admins are not bounded).
  static constexpr int64_t kUnreadBytes = 4 << 20;
  static constexpr int64_t kUnreadFds = 32;

  void session_opened(uid_t uid) {
    ++rows_[uid].sessions;
    ++sessions_;
  }
  void session_closed(uid_t uid) {
    change(uid, [](Row& r) { --r.sessions; });
    --sessions_;
  }
  void hello_started(uid_t uid) {
    ++rows_[uid].hellos;
    ++hellos_;
  }
  void hello_ended(uid_t uid) {
    change(uid, [](Row& r) { --r.hellos; });
    --hellos_;
  }
  // A session's outbox of `uid` changed by (bytes, fds); false when that
  // takes the user past its bound (giving back is always accepted).
  bool hold_unread(uid_t uid, bool admin, int64_t bytes, int64_t fds) {
    bool within = true;
    change(uid, [&](Row& r) {
      r.unread_bytes += bytes;
      r.unread_fds += fds;
      within = admin || (r.unread_bytes <= kUnreadBytes && r.unread_fds <= kUnreadFds);
    });
    return within || (bytes <= 0 && fds <= 0);
  }

  Row of(uid_t uid) const {
    auto it = rows_.find(uid);
    return it == rows_.end() ? Row{} : it->second;
  }
  // Of all users.
  size_t sessions() const { return sessions_; }
  size_t hellos() const { return hellos_; }
  const std::map<uid_t, Row>& rows() const { return rows_; }

 private:
  // Applies f to uid's row; a row that holds nothing any more goes.
  template <class F>
  void change(uid_t uid, F f) {
    auto it = rows_.try_emplace(uid).first;
    f(it->second);
    if (it->second.empty()) rows_.erase(it);
  }
  std::map<uid_t, Row> rows_;
  size_t sessions_ = 0, hellos_ = 0;
};

}  // namespace ferry::ferryd
