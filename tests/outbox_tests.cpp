// SPDX-License-Identifier: MIT
// The daemon's Outbox over a socketpair: order, descriptors, coalesced
// completions, the bound on a peer that does not read, and close-after-write.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>

#include "ferry/wire.hpp"
#include "net/outbox.hpp"
#include "net/server_context.hpp"

using namespace ferry::ferryd;
namespace proto = ferry::proto;

namespace {

struct Rig {
  boost::asio::io_context io;
  Outbox::socket_type sock{io};
  int peer = -1;
  std::shared_ptr<int> owner = std::make_shared<int>(0);  // what pending writes keep alive
  int failures = 0;
  std::string why;
  int drained = 0;
  std::unique_ptr<Outbox> box;
  // What a user's outboxes hold together, and that user's bound (held hook).
  struct User {
    int64_t bytes = 0, fds = 0, max_bytes = INT64_MAX, max_fds = INT64_MAX;
  };
  User* user = nullptr;

  explicit Rig(size_t limit = 1 << 20, User* u = nullptr) : user(u) {
    int fd[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fd) == 0);
    sock.assign(boost::asio::local::stream_protocol(), fd[0]);
    peer = fd[1];
    timeval tv{5, 0};
    setsockopt(peer, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    box = std::make_unique<Outbox>(sock, limit,
                                   Outbox::Hooks{[this] { return std::static_pointer_cast<void>(owner); },
                                                 [this](const char* w) {
                                                   ++failures;
                                                   why = w != nullptr ? w : "";
                                                 },
                                                 [this] { ++drained; },
                                                 [this](int64_t b, int64_t f) {
                                                   if (user == nullptr) return true;
                                                   user->bytes += b;
                                                   user->fds += f;
                                                   return (b <= 0 && f <= 0) ||
                                                          (user->bytes <= user->max_bytes && user->fds <= user->max_fds);
                                                 }});
  }
  ~Rig() {
    box.reset();
    ::close(peer);
  }
  void run() {
    io.restart();
    io.poll();
  }
  std::vector<uint8_t> read(std::vector<int>* fds = nullptr) {
    std::vector<uint8_t> msg;
    REQUIRE(proto::read_message(peer, msg, fds) == 0);
    return msg;
  }
};

proto::Reply reply(uint64_t request) {
  auto r = proto::make<proto::Reply>(proto::Type::reply);
  r.request = request;
  return r;
}

}  // namespace

TEST_CASE("outbox: messages arrive in order, a descriptor with its own message", "[outbox]") {
  Rig r;
  CHECK(r.box->untouched());
  auto a = reply(1), c = reply(3);
  auto b = proto::make<proto::ExportReply>(proto::Type::export_reply);
  b.request = 2;
  r.box->queue(&a, sizeof a);
  r.box->queue(&b, sizeof b, ::open("/dev/null", O_RDONLY | O_CLOEXEC));
  r.box->queue(&c, sizeof c);
  CHECK_FALSE(r.box->untouched());
  r.box->flush();
  r.run();
  std::vector<int> fds;
  proto::Reply got{};
  REQUIRE(proto::as(r.read(&fds), &got));
  CHECK(got.request == 1);
  CHECK(fds.empty());
  auto m = r.read(&fds);
  CHECK(proto::type_of(m) == proto::Type::export_reply);
  REQUIRE(fds.size() == 1);  // the descriptor came with the ExportReply, not before or after
  ::close(fds[0]);
  fds.clear();
  REQUIRE(proto::as(r.read(&fds), &got));
  CHECK(got.request == 3);
  CHECK(fds.empty());
  CHECK(r.failures == 0);
}

TEST_CASE("outbox: a peer that does not read hits the bound; the descriptor is not leaked", "[outbox]") {
  Rig r(4096);
  auto a = reply(1);
  for (int i = 0; i < 4096 / static_cast<int>(sizeof a); ++i) r.box->queue(&a, sizeof a);
  CHECK(r.failures == 0);
  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  r.box->queue(&a, sizeof a, fd);
  CHECK(r.failures == 1);
  CHECK(r.why.find("does not read") != std::string::npos);
  CHECK(::fcntl(fd, F_GETFD) < 0);  // closed by the outbox
}

TEST_CASE("outbox: close_after_write reports drained once everything is out", "[outbox]") {
  Rig r;
  auto a = reply(9);
  r.box->queue(&a, sizeof a);
  r.box->close_after_write();
  CHECK(r.box->closing());
  CHECK(r.drained == 0);  // not written yet
  r.run();
  CHECK(r.drained == 1);
  proto::Reply got{};
  REQUIRE(proto::as(r.read(), &got));
  CHECK(got.request == 9);
}

TEST_CASE("outbox: a write to a closed peer is reported, once", "[outbox]") {
  Rig r;
  ::close(r.peer);
  r.peer = ::open("/dev/null", O_RDONLY | O_CLOEXEC);  // keeps ~Rig's close harmless
  auto a = reply(1);
  r.box->queue(&a, sizeof a);
  r.box->flush();
  r.run();
  CHECK(r.failures == 1);
  CHECK(r.why.empty());
}

TEST_CASE("outbox: one user's outboxes share its bound; the one that goes past it fails, and gives back all", "[outbox]") {
  Rig::User u;
  u.max_bytes = 3000;
  u.max_fds = 1;
  Rig a(1 << 20, &u), b(1 << 20, &u);
  std::vector<uint8_t> m(1000);
  proto::Header h{static_cast<uint16_t>(proto::Type::reply), 0, 1000};
  std::memcpy(m.data(), &h, sizeof h);
  CHECK(a.box->queue(m.data(), m.size()));
  CHECK(b.box->queue(m.data(), m.size()));
  CHECK(u.bytes == 2000);
  CHECK(a.failures + b.failures == 0);
  CHECK(b.box->queue(m.data(), m.size()));
  CHECK(b.failures == 0);  // 3000: at the bound, not past it
  // Past it: the session that pushed it over goes, and its caller hears the
  // message will never be written (an Export then takes back its charge).
  CHECK_FALSE(a.box->queue(m.data(), m.size()));
  CHECK(a.failures == 1);
  CHECK(a.why.find("unread replies") != std::string::npos);
  a.box->drop();
  CHECK(u.bytes == 2000);  // what a held is given back
  // Descriptors in flight count too.
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  CHECK(b.box->queue(m.data(), m.size(), fds[0]));
  CHECK(u.fds == 1);
  CHECK_FALSE(b.box->queue(m.data(), m.size(), fds[1]));
  CHECK(b.failures == 1);
  CHECK_FALSE(b.box->queue(m.data(), m.size()));  // a failed session's outbox takes nothing more
  b.box->drop();
  CHECK(u.bytes == 0);
  CHECK(u.fds == 0);
}

TEST_CASE("outbox: a message's unsent hook runs once when its descriptor never leaves, never when it does",
          "[outbox]") {
  auto b = proto::make<proto::ExportReply>(proto::Type::export_reply);
  const auto devnull = [] { return ::open("/dev/null", O_RDONLY | O_CLOEXEC); };
  SECTION("sent: not called") {
    Rig r;
    int unsent = 0;
    r.box->queue(&b, sizeof b, devnull(), -1, [&] { ++unsent; });
    r.box->flush();
    r.run();
    std::vector<int> fds;
    r.read(&fds);
    REQUIRE(fds.size() == 1);
    ::close(fds[0]);
    r.box->drop();  // the session closes afterwards
    CHECK(unsent == 0);
  }
  SECTION("refused past the limit: called at once") {
    Rig r(sizeof b - 1);
    int unsent = 0;
    CHECK_FALSE(r.box->queue(&b, sizeof b, devnull(), -1, [&] { ++unsent; }));
    CHECK(unsent == 1);
    r.box->drop();
    CHECK(unsent == 1);
  }
  SECTION("queued, then the session closes before it is written: called by drop, once") {
    Rig r;
    int unsent = 0;
    CHECK(r.box->queue(&b, sizeof b, devnull(), -1, [&] { ++unsent; }));
    CHECK(unsent == 0);
    r.box->drop();
    CHECK(unsent == 1);
    r.box->drop();
    CHECK(unsent == 1);
  }
  SECTION("sendmsg fails (the peer is gone): reported, then called once the session drops it") {
    Rig r;
    int unsent = 0;
    ::close(r.peer);
    r.peer = ::open("/dev/null", O_RDONLY | O_CLOEXEC);  // ~Rig closes it
    CHECK(r.box->queue(&b, sizeof b, devnull(), -1, [&] { ++unsent; }));
    r.box->flush();
    r.run();
    CHECK(r.failures == 1);
    CHECK(unsent == 0);  // the session decides: it drops the outbox as it closes
    r.box->drop();
    CHECK(unsent == 1);
  }
  SECTION("an outbox destroyed without a drop (the daemon stopping) calls nothing") {
    Rig r;
    int unsent = 0;
    CHECK(r.box->queue(&b, sizeof b, devnull(), -1, [&] { ++unsent; }));
    r.box.reset();
    CHECK(unsent == 0);
  }
}

TEST_CASE("the log's budget: ten lines about sessions a second, the rest counted and summed up once", "[log]") {
  using namespace std::chrono;
  LogBudget b;
  uint64_t left_out = 0;
  const auto t0 = steady_clock::time_point{} + hours(1);
  int written = 0;
  for (int i = 0; i < 25; ++i) written += b.take(&left_out, t0 + milliseconds(i)) ? 1 : 0;
  CHECK(written == static_cast<int>(LogBudget::kPerSecond));
  CHECK(left_out == 15);
  CHECK(b.left_out == 15);
  // Within the same second: still refused.
  CHECK_FALSE(b.take(&left_out, t0 + milliseconds(999)));
  CHECK(left_out == 16);
  // A new second: the window starts again (its first line says how many were left out).
  CHECK(b.take(&left_out, t0 + milliseconds(1000)));
  CHECK(b.left_out == 0);
  CHECK(b.used == 1);
  CHECK(left_out == 16);  // the total only grows
}

TEST_CASE("outbox: a message without a descriptor has its unsent hook too; handed to the socket, it counts as sent",
          "[outbox]") {
  auto b = proto::make<proto::ExportReply>(proto::Type::export_reply);  // a CUDA handle travels in the bytes
  SECTION("dropped before it reached the socket: called once") {
    Rig r;
    int unsent = 0;
    CHECK(r.box->queue(&b, sizeof b, -1, -1, [&] { ++unsent; }));
    r.box->drop();
    r.box->drop();
    CHECK(unsent == 1);
  }
  SECTION("handed to the socket, then dropped: not called (its bytes may be the peer's already)") {
    Rig r;
    int unsent = 0;
    CHECK(r.box->queue(&b, sizeof b, -1, -1, [&] { ++unsent; }));
    r.box->flush();
    r.box->drop();
    r.run();
    CHECK(unsent == 0);
  }
  SECTION("behind a message that waits to be written, dropped: only its own hook runs") {
    Rig r;
    int first = 0, second = 0;
    auto a = reply(1);
    CHECK(r.box->queue(&a, sizeof a, -1, -1, [&] { ++first; }));
    r.box->flush();  // the first is handed to the socket
    CHECK(r.box->queue(&b, sizeof b, -1, -1, [&] { ++second; }));
    r.box->drop();
    r.run();
    CHECK(first == 0);
    CHECK(second == 1);
  }
}
