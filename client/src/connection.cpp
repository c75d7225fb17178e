// SPDX-License-Identifier: MIT
#include "connection.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ferry/wire.hpp"

namespace ferry::client {

Connection::~Connection() { close(); }

std::string& Connection::refusal_text() {
  thread_local std::string text;
  return text;
}

int Connection::open(const std::string& path, const proto::Hello& hello, proto::Welcome* welcome, int* segment_fd) {
  *segment_fd = -1;
  if (const char* e = std::getenv("FERRY_TIMEOUT_MS")) {
    const long v = std::strtol(e, nullptr, 10);
    if (v > 0 && v < 86'400'000) timeout_ms_ = static_cast<int>(v);
  }
  if (int r = proto::connect_unix(path, &fd_, timeout_ms()); r != 0) return r;
  ucred peer{};
  socklen_t len = sizeof peer;
  if (::getsockopt(fd_, SOL_SOCKET, SO_PEERCRED, &peer, &len) == 0) peer_pid_ = peer.pid;
  // A daemon that refuses the connection at once (a bound of its users)
  // writes why and closes, maybe before the Hello is out: read it anyway.
  const bool sent = proto::send_all(fd_, &hello, sizeof hello) == 0;
  // The daemon answers at once; a bound keeps a stalled one from hanging us.
  timeval tv{timeout_ms() / 1000, (timeout_ms() % 1000) * 1000};
  setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::vector<uint8_t> msg;
  std::vector<int> fds;
  int r = proto::read_message(fd_, msg, &fds);
  if (r == -EAGAIN) r = -ETIMEDOUT;
  timeval zero{0, 0};
  setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &zero, sizeof zero);
  proto::Error e{};
  if (r == 0 && proto::type_of(msg) == proto::Type::error && proto::as(msg, &e)) {
    r = e.code != 0 ? e.code : -EPROTO;
    refusal_ = proto::get_text(e.text);
  } else if (!sent) {
    r = -ECONNRESET;
  } else if (r == 0 && (proto::type_of(msg) != proto::Type::welcome || fds.size() != 2 || !proto::as(msg, welcome))) {
    r = -EPROTO;
  }
  if (r == 0) {
    *segment_fd = fds[0];
    bell_ = fds[1];
    fds.clear();
  }
  for (int f : fds) ::close(f);
  return r;
}

void Connection::start() {
  receiver_ = std::thread([this] { receive_loop(); });
}

void Connection::close() {
  if (fd_ < 0) return;
  ::shutdown(fd_, SHUT_RDWR);
  if (receiver_.joinable()) receiver_.join();
  ::close(fd_);
  fd_ = -1;
  if (bell_ >= 0) ::close(bell_);
  bell_ = -1;
  for (int f : fds_in_) ::close(f);
  fds_in_.clear();
  for (auto& [id, a] : answers_)
    if (a.fd >= 0) ::close(a.fd);
  answers_.clear();
}

void Connection::fail(int why, const char* what) {
  int expected = 0;
  if (!failed_.compare_exchange_strong(expected, why)) return;
  // Once per process: a program under ferry-run goes on through its driver.
  static std::atomic<bool> said{false};
  if (!said.exchange(true))
    std::fprintf(stderr, "ferry: the server of this client's socket sent %s: it is no ferryd, and is not used again\n",
                 what);
  ::shutdown(fd_, SHUT_RDWR);  // the receiver sees the end, and says why: failed_
}

void Connection::abandon() {
  if (fd_ >= 0) ::close(fd_);
  if (bell_ >= 0) ::close(bell_);
  fd_ = bell_ = -1;
}

int Connection::ring() {
  const char one = 1;
  // EAGAIN: its buffer is full, so ferryd has a wake-up pending anyway.
  if (::send(bell_, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1 || errno == EAGAIN) return 0;
  return -ECONNRESET;  // ferryd went
}

int Connection::send(const void* data, size_t n, int fd) {
  std::lock_guard lock(send_mu_);
  if (fd < 0) return proto::send_all(fd_, data, n) == 0 ? 0 : -ECONNRESET;
  ssize_t k;
  do {
    k = proto::send_fd(fd_, data, n, fd, MSG_NOSIGNAL);
  } while (k < 0 && errno == EINTR);
  return k == static_cast<ssize_t>(n) ? 0 : -ECONNRESET;
}

int Connection::exchange(void* msg, size_t n, uint64_t* request_field, int fd, Answer* out, int wait_ms) {
  uint64_t id;
  {
    std::lock_guard lock(mu_);
    if (dead_ != 0) return dead_;
    id = next_request_++;
  }
  *request_field = id;
  if (int r = send(msg, n, fd); r != 0) {
    // The daemon closed the connection: the receiver reads why (a fatal Error
    // comes before the end), and the caller hears that, not just a reset.
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms()), [&] { return dead_ != 0; });
    return dead_ != 0 ? dead_ : r;
  }
  std::unique_lock lock(mu_);
  const bool came =
      cv_.wait_for(lock, std::chrono::milliseconds(wait_ms), [&] { return answers_.count(id) != 0 || dead_ != 0; });
  if (!came) {
    abandoned_.insert(id);  // a stalled daemon: the caller hears so, not nothing
    return -ETIMEDOUT;
  }
  auto it = answers_.find(id);
  if (it == answers_.end()) return dead_;
  *out = std::move(it->second);
  answers_.erase(it);
  return 0;
}

bool Connection::dispatch(proto::Type type, const uint8_t* m, size_t n, int* why) {
  using T = proto::Type;
  switch (type) {
    case T::shutdown:
      *why = -ESHUTDOWN;
      return false;
    case T::reply:
    case T::token_reply:
    case T::buffer_reply:
    case T::staging_reply:
    case T::export_reply:
      take_answer(type, m, n);
      return true;
    case T::error:
      return take_error(m, why);
    default:
      return true;  // nothing else is meant for a client; ignore it
  }
}

// A reply: kept for the request's caller with the descriptor it brought,
// or, for a request its caller gave up on, let go of.
void Connection::take_answer(proto::Type type, const uint8_t* m, size_t n) {
  using T = proto::Type;
  uint64_t request;
  std::memcpy(&request, m + sizeof(proto::Header), sizeof request);
  Answer a{type, std::vector<uint8_t>(m, m + n), -1};
  proto::ExportReply e{};
  proto::StagingReply s{};
  if (type == T::export_reply) std::memcpy(&e, m, sizeof e);
  if (type == T::staging_reply) std::memcpy(&s, m, sizeof s);
  // Its descriptor came with these bytes, so it is the oldest unclaimed one.
  const bool has_fd = (type == T::export_reply && e.status == 0 && e.kind == proto::kIpcLevelZero) ||
                      (type == T::staging_reply && s.status == 0);
  {
    std::lock_guard lock(mu_);
    if (has_fd && !fds_in_.empty()) {
      a.fd = fds_in_.front();
      fds_in_.pop_front();
    }
    if (abandoned_.erase(request) != 0) {
      if (a.fd >= 0) ::close(a.fd);
      if (type == T::staging_reply && s.status == 0) release_late_area(s.area);  // counted against the user until it is
      return;
    }
    answers_[request] = std::move(a);
  }
  cv_.notify_all();
}

// An error: fatal (false, *why set), or a refused request, answered as a
// Reply with the error.
bool Connection::take_error(const uint8_t* m, int* why) {
  proto::Error e;
  std::memcpy(&e, m, sizeof e);
  if (e.h.flags & proto::kErrorFatal) {
    *why = e.code != 0 ? e.code : -EPROTO;
    return false;
  }
  if (e.request == 0) return true;
  auto r = proto::make<proto::Reply>(proto::Type::reply);
  r.request = e.request;
  r.status = e.code;
  const auto* p = reinterpret_cast<const uint8_t*>(&r);
  {
    std::lock_guard lock(mu_);
    if (abandoned_.erase(e.request) != 0) return true;
    answers_[e.request] = Answer{proto::Type::reply, std::vector<uint8_t>(p, p + sizeof r), -1, proto::get_text(e.text)};
  }
  cv_.notify_all();
  return true;
}

void Connection::tell(void* msg, size_t n, uint64_t* request_field) {
  {
    std::lock_guard lock(mu_);
    if (dead_ != 0) return;
    *request_field = next_request_++;
    abandoned_.insert(*request_field);
  }
  send(msg, n);
}

void Connection::release_late_area(uint64_t area) {
  // mu_ held (dispatch): its answer is dropped like the grant's was.
  auto m = proto::make<proto::StagingRelease>(proto::Type::staging_release);
  m.request = next_request_++;
  m.area = area;
  abandoned_.insert(m.request);
  std::lock_guard send(send_mu_);
  proto::send_all(fd_, &m, sizeof m);
}

void Connection::receive_loop() {
  std::vector<uint8_t> buf(64 * 1024);
  size_t used = 0;
  int why = -ECONNRESET;
  for (bool stop = false; !stop;) {
    ssize_t n = proto::recv_fds(fd_, buf.data() + used, buf.size() - used, 0, [&](int fd) {
      std::lock_guard lock(mu_);
      fds_in_.push_back(fd);
    });
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n < 0 && errno == EPROTO) why = -EPROTO;
      break;
    }
    used += static_cast<size_t>(n);
    size_t off = 0;
    while (!stop) {
      proto::Decoded d = proto::decode(buf.data() + off, used - off);
      if (d.result == proto::Decode::need_more) break;
      if (d.result == proto::Decode::bad) {
        why = -EPROTO;
        stop = true;
        break;
      }
      stop = !dispatch(d.type, buf.data() + off, d.consumed, &why);
      off += d.consumed;
    }
    std::memmove(buf.data(), buf.data() + off, used - off);
    used -= off;
    if (used == buf.size()) break;  // cannot happen with fixed-size messages
  }
  if (const int failed = failed_.load(); failed != 0) why = failed;
  {
    std::lock_guard lock(mu_);
    dead_ = why;
    ended_.store(why, std::memory_order_release);
  }
  cv_.notify_all();
  tickets_.ended(why);
}

}  // namespace ferry::client
