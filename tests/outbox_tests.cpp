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
#include "outbox.hpp"

using namespace ferry::ferryd;
namespace proto = ferry::proto;

namespace {

struct Rig {
  boost::asio::io_context io;
  Outbox::socket_type sock{io};
  int peer = -1;
  std::shared_ptr<int> owner = std::make_shared<int>(0);  // what pending writes keep alive
  int failures = 0;
  const char* why = nullptr;
  int drained = 0;
  std::unique_ptr<Outbox> box;

  explicit Rig(size_t limit = 1 << 20) {
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
                                                   why = w;
                                                 },
                                                 [this] { ++drained; }});
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
  REQUIRE(r.why != nullptr);
  CHECK(std::string(r.why).find("does not read") != std::string::npos);
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
  CHECK(r.why == nullptr);
}
