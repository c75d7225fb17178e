// SPDX-License-Identifier: MIT
// A session's outgoing bytes: queued in order, written one batch at a time,
// a message that carries a descriptor sent alone with it (SCM_RIGHTS).
// Bounded: a peer that stops reading is reported (`on_failed`) instead of
// holding the daemon's memory. io thread only.
#pragma once

#include <boost/asio/local/stream_protocol.hpp>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace ferry::ferryd {

class Outbox {
 public:
  using socket_type = boost::asio::local::stream_protocol::socket;

  // What the owner (the session) is told, and what it lends.
  struct Hooks {
    std::function<std::shared_ptr<void>()> keep_alive;  // held by pending writes (the socket's owner)
    std::function<void(const char* why)> failed;         // a write failed, or the peer does not read
    std::function<void()> drained;                       // all written after close_after_write()
    // What this outbox holds changed by (bytes, descriptors): the owner sums
    // them per user. Returns false when the user may hold no more (the
    // outbox then fails). May be empty: no bound beyond `limit`.
    std::function<bool(int64_t bytes, int64_t fds)> held;
  };

  Outbox(socket_type& socket, size_t limit, Hooks hooks);
  ~Outbox();
  Outbox(const Outbox&) = delete;
  Outbox& operator=(const Outbox&) = delete;

  // Appends a message; `fd` and `fd2` (>= 0) go with it and are the
  // outbox's to close. Over the limit nothing is queued and `failed` is
  // called. False when the message will never be written: refused, or its
  // session failed for it (its user past the unread bound). `unsent` is
  // called once if the message never leaves: refused or failed here, or
  // dropped before any of it reached the socket (the session failed or
  // closed first, or sendmsg refused its descriptors: ETOOMANYREFS).
  bool queue(const void* data, size_t bytes, int fd = -1, int fd2 = -1, std::function<void()> unsent = {});
  // Starts writing, if not already.
  void flush();
  // Calls `drained` once everything queued so far is written.
  void close_after_write();
  bool closing() const { return closing_; }
  // Nothing was ever queued.
  bool untouched() const { return !touched_; }
  // Descriptors queued and not yet sent (a client that does not read parks them).
  size_t queued_fds() const { return fd_marks_.size(); }  // a message being sent keeps its marks until sent
  // Stops: closes the descriptors not sent and writes nothing more.
  void drop();

 private:
  void send_with_fd();
  // Drops the first n bytes of pending_ (handed to the socket: their
  // messages' hooks go unrun).
  void drop_front(size_t n);
  // Tells hooks_.held what changed since it was last told; false: over the user's bound.
  bool settle();

  socket_type& socket_;
  size_t limit_;
  Hooks hooks_;
  std::vector<uint8_t> pending_;  // not yet handed to the socket
  std::vector<uint8_t> writing_;  // being written
  // Offsets in pending_ of messages that carry descriptors, one mark each
  // (a message with two has two marks at its offset).
  struct Mark {
    size_t at;
    int fd;
  };
  std::deque<Mark> fd_marks_;
  // Offsets in pending_ of messages with an `unsent` hook. A message handed
  // to the socket counts as sent (its bytes may be in the peer's hands
  // before the write's completion is seen): only those still here when the
  // outbox drops, or whose sendmsg refused its descriptors, run their hook.
  std::deque<std::pair<size_t, std::function<void()>>> unsent_;
  bool sending_fd_ = false;
  bool closing_ = false;
  bool dropped_ = false;
  bool touched_ = false;
  size_t told_bytes_ = 0, told_fds_ = 0;  // what hooks_.held was last told this outbox holds
};

}  // namespace ferry::ferryd
