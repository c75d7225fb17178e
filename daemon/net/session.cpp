// SPDX-License-Identifier: MIT
#include "net/session.hpp"

#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <boost/asio/post.hpp>

#include "ferry/fdpass.hpp"
#include "log.hpp"
#include "admin/credentials.hpp"

namespace ferry::ferryd {

namespace {
constexpr size_t kReadChunk = 64 * 1024;
constexpr size_t kMaxPending = 1 << 20;  // bytes queued for a client before it is dropped
// Messages handled per turn of the io thread; the rest wait for the next
// turn (a post), so one connection's burst delays the rings and the other
// sessions by a bounded amount.
constexpr int kMessagesPerTurn = 64;
}  // namespace

Session::Session(socket_type socket, Context& ctx, std::function<void(const std::shared_ptr<Session>&)> closed)
    : socket_(std::move(socket)),
      ctx_(ctx),
      closed_hook_(std::move(closed)),
      outbox_(socket_, kMaxPending,
              {[this] { return std::static_pointer_cast<void>(shared_from_this()); },
               [this](const char* why) {
                 if (why != nullptr) FERRY_LOG(warn, "closing session of pid %d (uid %u): %s", pid, uid, why);
                 close();
               },
               [this] { close(); },
               [this](int64_t bytes, int64_t fds) { return ctx_.users.hold_unread(uid, backlog_admin_, bytes, fds); }}),
      requests_(ctx, *this),
      hello_deadline_(socket_.get_executor()),
      close_deadline_(socket_.get_executor()) {
  cred = peer_cred(socket_.native_handle());
  pid = cred.pid;
  uid = cred.uid;
  backlog_admin_ = is_admin(ctx_.options, cred);
  in_.resize(kReadChunk);
}

void Session::start() {
  arm_hello_deadline();
  read();
}

void Session::arm_hello_deadline() {
  hello_deadline_.expires_after(std::chrono::microseconds(static_cast<int64_t>(ctx_.options.hello_seconds * 1e6)));
  hello_deadline_.async_wait([this, self = shared_from_this()](const boost::system::error_code& ec) {
    // A Hello that came in time and waits for its segment is not late.
    if (ec || closed_ || client() || paused_) return;
    FERRY_LOG(debug, "closing session of pid %d: no Hello within %.1f s", pid, ctx_.options.hello_seconds);
    close();
  });
}

void Session::close() {
  if (closed_) return;
  closed_ = true;
  cancelled_->store(true);
  hello_deadline_.cancel();
  close_deadline_.cancel();
  close_fds();
  outbox_.drop();
  boost::system::error_code ec;
  socket_.close(ec);
  if (const ClientRef& c = client()) {
    ctx_.engine.client_gone(c);
    ctx_.engine.clients().publish();
    FERRY_LOG(info, "client %llu (pid %d) gone; %u copies still in flight", static_cast<unsigned long long>(c->id()),
              pid, c->in_flight());
  }
  if (closed_hook_) closed_hook_(shared_from_this());
}

void Session::shut_down() {
  if (closed_) return;
  auto m = proto::make<proto::Shutdown>(proto::Type::shutdown);
  m.reason = -ESHUTDOWN;
  outbox_.queue(&m, sizeof m);
  close_soon();
}

void Session::read() {
  if (reading_ || closed_) return;
  // While a Hello is being answered, bytes are kept unhandled, up to a chunk:
  // reading goes on only to see the peer go (a connect, Hello and close).
  if (paused_ && in_used_ >= kReadChunk) return;
  if (in_.size() - in_used_ < kReadChunk / 2) in_.resize(in_used_ + kReadChunk);
  reading_ = true;
  // recvmsg rather than read_some: Import and EventPool come with a file descriptor.
  socket_.async_wait(socket_type::wait_read, [this, self = shared_from_this()](const boost::system::error_code& ec) {
    reading_ = false;
    if (closed_) return;
    if (ec) return close();
    ssize_t n = proto::recv_fds(socket_.native_handle(), in_.data() + in_used_, in_.size() - in_used_, MSG_DONTWAIT,
                                [&](int fd) { fds_in_.push_back(fd); });
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return read();
    // The client went away (or its socket failed): it frees what it held.
    if (n <= 0) return close();
    in_used_ += static_cast<size_t>(n);
    // Nothing may come with a descriptor before the Welcome is out.
    if (paused_ && !fds_in_.empty()) return fatal(-EPROTO, "descriptors sent before the Welcome");
    if (!consume()) return;  // more to handle: the next turn reads on
    read();
  });
}

bool Session::consume() {
  consuming_ = true;
  struct Done {
    bool& flag;
    ~Done() { flag = false; }
  } done{consuming_};
  size_t off = 0;
  bool more = false;
  for (int handled = 0; !closed_ && !outbox_.closing() && !paused_; ++handled) {
    if (handled == kMessagesPerTurn) {
      more = true;
      break;
    }
    proto::Decoded d = proto::decode(in_.data() + off, in_used_ - off);
    if (d.result == proto::Decode::need_more) {
      // Refused from its header alone: never buffered up to the size it claims.
      if (in_used_ - off >= sizeof(proto::Header) && !Requests::client_may_send(d.type)) {
        fatal(-EPROTO, "message type a client may not send");
        return false;
      }
      break;
    }
    if (d.result == proto::Decode::bad) {
      fatal(-EPROTO, d.why);
      return false;
    }
    deliver(requests_.handle(d.type, in_.data() + off));
    off += d.consumed;
  }
  if (closed_ || outbox_.closing()) return false;
  std::memmove(in_.data(), in_.data() + off, in_used_ - off);
  in_used_ -= off;
  // Descriptors no message claimed were not expected: they are not kept.
  // (One that came with a message still arriving waits for it.)
  if (!paused_ && (in_used_ == 0 || fds_in_.size() > 2)) close_fds();
  if (more) {
    boost::asio::post(socket_.get_executor(), [this, self = shared_from_this()] {
      if (!closed_ && consume()) read();
    });
    return false;
  }
  return true;
}

void Session::resume() {
  if (!paused_) return;
  paused_ = false;
  // Answered at once, inside consume(): it goes on with the next message itself.
  if (closed_ || consuming_) return;
  if (consume()) read();
}

Peer::Flow Session::flow() const {
  const int fd = const_cast<socket_type&>(socket_).native_handle();
  Flow f;
  pollfd p{fd, POLLRDHUP, 0};
  f.hung_up = ::poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  f.untouched = outbox_.untouched();
  f.queued_fds = outbox_.queued_fds();
  int n = 0;
  f.unread_bytes = ::ioctl(fd, SIOCOUTQ, &n) == 0 && n > 0 ? static_cast<size_t>(n) : 0;
  return f;
}

Peer::Later Session::defer() {
  paused_ = true;
  return {cancelled_, [this, self = shared_from_this()](Answer a) {
            if (closed_) {  // gone meanwhile: what the answer carried goes too
              for (int fd : {a.fd, a.fd2})
                if (fd >= 0) ::close(fd);
              return;
            }
            deliver(std::move(a));
            resume();
          }};
}

int Session::take_fd() {
  if (fds_in_.empty()) return -1;
  int fd = fds_in_.front();
  fds_in_.pop_front();
  return fd;
}

void Session::close_fds() {
  for (int fd : fds_in_) ::close(fd);
  fds_in_.clear();
}

void Session::deliver(Answer a) {
  switch (a.kind) {
    case Answer::Kind::none:
      return;
    case Answer::Kind::close:
      return close();
    case Answer::Kind::message:
      // Its unsent hook goes with it: the outbox calls it if the
      // descriptors never leave, now or once the session ends.
      outbox_.queue(a.bytes.data(), a.bytes.size(), a.fd, a.fd2, std::move(a.unsent));
      outbox_.flush();
      return;
    case Answer::Kind::end:
      if (ctx_.session_log.take(&ctx_.stats.log_lines_left_out))
        FERRY_LOG(warn, "closing session of pid %d: %s", pid, a.why.c_str());
      // Its ring is not read again: nothing more of it reaches the device.
      if (const ClientRef& c = client()) c->break_ring();
      outbox_.queue(a.bytes.data(), a.bytes.size());
      close_soon();
      return;
  }
}

void Session::fatal(int code, const char* why) { deliver(Answer::error(0, code, why, true)); }

void Session::close_soon() {
  if (closed_ || outbox_.closing()) return;
  outbox_.close_after_write();
  if (closed_) return;
  close_deadline_.expires_after(kCloseWithin);
  close_deadline_.async_wait([this, self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec || closed_) return;
    FERRY_LOG(debug, "session of pid %d: its last messages were not read within %lld s; closed", pid,
              static_cast<long long>(kCloseWithin.count()));
    close();
  });
}

}  // namespace ferry::ferryd
