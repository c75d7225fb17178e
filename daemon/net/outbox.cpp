// SPDX-License-Identifier: MIT
#include "net/outbox.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "ferry/fdpass.hpp"
#include "ferry/proto.hpp"

namespace ferry::ferryd {

Outbox::Outbox(socket_type& socket, size_t limit, Hooks hooks)
    : socket_(socket), limit_(limit), hooks_(std::move(hooks)) {}

Outbox::~Outbox() {
  // Only a session that closed tells what went unsent (the engine may be
  // gone by the time a session object is).
  unsent_.clear();
  drop();
}

void Outbox::drop() {
  dropped_ = true;
  for (const Mark& m : fd_marks_) ::close(m.fd);
  fd_marks_.clear();
  auto hooks = std::move(unsent_);
  unsent_.clear();
  for (auto& [at, hook] : hooks) hook();
  pending_.clear();
  pending_.shrink_to_fit();
  settle();
}

bool Outbox::settle() {
  if (!hooks_.held) return true;
  // writing_ is in the socket's hands until its write completes: still ours.
  const size_t bytes = dropped_ ? 0 : pending_.size() + writing_.size();
  const size_t fds = dropped_ ? 0 : queued_fds();
  const auto db = static_cast<int64_t>(bytes) - static_cast<int64_t>(told_bytes_);
  const auto df = static_cast<int64_t>(fds) - static_cast<int64_t>(told_fds_);
  if (db == 0 && df == 0) return true;
  told_bytes_ = bytes;
  told_fds_ = fds;
  return hooks_.held(db, df);
}

bool Outbox::queue(const void* data, size_t bytes, int fd, int fd2, std::function<void()> unsent) {
  touched_ = true;
  const bool refused = dropped_ || pending_.size() + bytes > limit_;
  if (refused) {
    for (int f : {fd, fd2})
      if (f >= 0) ::close(f);
    if (unsent) unsent();
    if (!dropped_) hooks_.failed("it does not read its socket");
    return false;
  }
  for (int f : {fd, fd2})
    if (f >= 0) fd_marks_.push_back({pending_.size(), f});
  if (unsent) unsent_.emplace_back(pending_.size(), std::exchange(unsent, nullptr));
  const auto* p = static_cast<const uint8_t*>(data);
  pending_.insert(pending_.end(), p, p + bytes);
  // Over the user's bound (all its sessions' unread replies together): this
  // session, the one that pushed it over, goes.
  if (settle()) return true;
  // Failed for it: never written (the session drops the outbox, and with
  // it this message's hook).
  hooks_.failed("its user's sessions hold the most unread replies or descriptors a user may");
  return false;
}

void Outbox::close_after_write() {
  closing_ = true;
  flush();
}

// Drops the first n bytes of pending_, moving the offsets that point into it.
void Outbox::drop_front(size_t n) {
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(n));
  for (Mark& m : fd_marks_) m.at -= n;
  while (!unsent_.empty() && unsent_.front().first < n) unsent_.pop_front();
  for (auto& u : unsent_) u.first -= n;
}

void Outbox::flush() {
  if (dropped_ || !writing_.empty() || sending_fd_) return;
  if (pending_.empty()) {
    if (closing_) hooks_.drained();
    return;
  }
  if (!fd_marks_.empty() && fd_marks_.front().at == 0) {
    send_with_fd();
    return;
  }
  // Everything up to the next message that carries an fd.
  const size_t upto = fd_marks_.empty() ? pending_.size() : fd_marks_.front().at;
  writing_.assign(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(upto));
  drop_front(upto);
  boost::asio::async_write(socket_, boost::asio::buffer(writing_),
                           [this, keep = hooks_.keep_alive()](const boost::system::error_code& ec, size_t) {
                             writing_.clear();
                             settle();
                             if (dropped_) return;
                             if (ec) return hooks_.failed(nullptr);
                             flush();
                           });
}

// Sends the message at the front of pending_ with its descriptors, in one sendmsg.
void Outbox::send_with_fd() {
  sending_fd_ = true;
  socket_.async_wait(socket_type::wait_write, [this, keep = hooks_.keep_alive()](const boost::system::error_code& ec) {
    sending_fd_ = false;
    if (dropped_) return;
    if (ec) return hooks_.failed(nullptr);
    proto::Header h;
    std::memcpy(&h, pending_.data(), sizeof h);
    int fds[2];
    size_t count = 0;
    for (size_t i = 0; i < fd_marks_.size() && fd_marks_[i].at == 0 && count < 2; ++i) fds[count++] = fd_marks_[i].fd;
    ssize_t n = proto::send_fds(socket_.native_handle(), pending_.data(), h.size, fds, count, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return flush();  // waits for room again
    // Refused (ETOOMANYREFS: the daemon's descriptors in flight) or only
    // partly sent: the stream is broken, and the session says why.
    if (n < 0) {
      const std::string why = std::string("a message with a descriptor (a Welcome, an export) could not be sent: ") +
                              std::strerror(errno);
      return hooks_.failed(why.c_str());
    }
    if (n != static_cast<ssize_t>(h.size)) {
      // Its descriptors left with the first bytes: the message counts as sent.
      for (size_t i = 0; i < count; ++i) {
        ::close(fds[i]);
        fd_marks_.pop_front();
      }
      drop_front(static_cast<size_t>(n));
      return hooks_.failed("a message with a descriptor was only partly sent");
    }
    for (size_t i = 0; i < count; ++i) {
      ::close(fds[i]);
      fd_marks_.pop_front();
    }
    drop_front(h.size);
    settle();
    flush();
  });
}

}  // namespace ferry::ferryd
