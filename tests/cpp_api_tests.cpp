// SPDX-License-Identifier: MIT
// The C++ wrapper (ferry/ferry.hpp): RAII ownership, exceptions carrying the
// errno, and every wrapper reaching the C call it names.
#include <ferry/ferry.hpp>

#include <algorithm>
#include <cstring>
#include <vector>

#include "daemon_fixture.hpp"

using namespace ferry::test;

TEST_CASE("C++: connect, allocate, upload, wait, download", "[cpp]") {
  Daemon d;
  ferry::Client c(d.socket);
  REQUIRE(c.get() != nullptr);
  ferry_info info = c.info();
  CHECK(info.slot_count > 0);
  CHECK(std::string(info.backend) == (std::getenv("FERRY_TEST_BACKEND") ? std::getenv("FERRY_TEST_BACKEND") : "level-zero"));
  ferry::Buffer b(c, 1 << 16);
  CHECK(b.id().id != 0);
  CHECK(b.size() == 1u << 16);
  std::vector<uint8_t> src(1 << 16), back(1 << 16);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  ferry_ticket t = c.upload(b.id(), 0, src.data(), src.size());
  CHECK(t > 0);
  CHECK(c.wait(t));
  CHECK(c.flush());
  c.download(b.id(), 0, back.data(), back.size());
  CHECK(back == src);
}

TEST_CASE("C++: reserve, write in place, commit; cancel; errors as exceptions", "[cpp][reserve]") {
  Daemon d;
  ferry::Client c(d.socket);
  ferry::Buffer b(c, 4096);
  ferry_reservation r = c.reserve(4096);
  std::memset(r.data, 0x3C, 4096);
  CHECK(c.wait(c.commit(r, b.id(), 0)));
  std::vector<uint8_t> back(4096);
  c.download(b.id(), 0, back.data(), back.size());
  CHECK(back == std::vector<uint8_t>(4096, 0x3C));
  ferry_reservation g = c.reserve(16);
  c.cancel(g);
  CHECK_THROWS_AS(c.cancel(g), ferry::error);      // used up
  CHECK_THROWS_AS(c.commit(r, b.id(), 0), ferry::error);
  CHECK_THROWS_AS(c.reserve(0), ferry::error);
  CHECK(c.flush());
}

TEST_CASE("C++: errors are exceptions with the errno and the call's name", "[cpp]") {
  Daemon d;
  SECTION("no daemon at that path") {
    try {
      ferry::Client c(d.socket + ".absent");
      FAIL("connected to nothing");
    } catch (const ferry::error& e) {
      CHECK(e.code().value() == ENXIO);
      CHECK(std::string(e.what()).find("ferry_connect") != std::string::npos);
      // The whole reason, once: the path libferry names, not "ferry_last_error names it".
      CHECK(std::string(e.what()).find(d.socket + ".absent") != std::string::npos);
      CHECK(std::string(e.what()).find("ferry_last_error") == std::string::npos);
    }
  }
  SECTION("a buffer the client does not have") {
    ferry::Client c(d.socket);
    uint8_t x[4] = {};
    try {
      c.upload(ferry_buffer{999}, 0, x, sizeof x);
      FAIL("uploaded to no buffer");
    } catch (const ferry::error& e) {
      CHECK(e.code().value() == ENOENT);
      const std::string what = e.what();
      CHECK(what.rfind("ferry_upload: ", 0) == 0);
      CHECK(what.find("ferry_upload: ferry_upload") == std::string::npos);  // the call named once
      CHECK(what.find("buffer 999") != std::string::npos);
    }
    CHECK_THROWS_AS(c.download(ferry_buffer{999}, 0, x, sizeof x), ferry::error);
    CHECK_THROWS_AS(c.grant(ferry_buffer{999}, FERRY_RIGHT_UPLOAD), ferry::error);
    CHECK_THROWS_AS(c.revoke(ferry_buffer{999}), ferry::error);
  }
  SECTION("out of range") {
    ferry::Client c(d.socket);
    ferry::Buffer b(c, 64);
    uint8_t x[65] = {};
    try {
      c.upload(b.id(), 0, x, sizeof x);
      FAIL("uploaded past the end");
    } catch (const ferry::error& e) {
      CHECK(e.code().value() == ERANGE);
      CHECK_THAT(e.what(), Catch::StartsWith("ferry_upload: offset 0 + 65 bytes is past the end"));
    }
  }
}

TEST_CASE("C++: a Buffer is freed when it goes out of scope; a moved one only once", "[cpp]") {
  Daemon d;
  ferry::Client c(d.socket);
  auto held = [&] { return d.status().get<uint64_t>("held.buffers"); };
  {
    ferry::Buffer a(c, 4096);
    CHECK(held() == 1);
    ferry::Buffer b(std::move(a));
    CHECK(a.id().id == 0);
    CHECK(held() == 1);
  }
  CHECK(held() == 0);
  // A moved Client owns the connection; the source holds nothing.
  ferry::Client moved(std::move(c));
  CHECK(c.get() == nullptr);
  ferry::Buffer e(moved, 128);
  CHECK(held() == 1);
}

TEST_CASE("C++: grant and open between two clients", "[cpp]") {
  Daemon d;
  ferry::Client owner(d.socket), user(d.socket);
  ferry::Buffer b(owner, 4096);
  ferry_token tok = owner.grant(b.id(), FERRY_RIGHT_UPLOAD | FERRY_RIGHT_DOWNLOAD);
  auto [id, bytes] = user.open(tok);
  CHECK(bytes == 4096);
  std::vector<uint8_t> src(4096, 0x3c), back(4096);
  CHECK(user.wait(user.upload(id, 0, src.data(), src.size())));
  owner.download(b.id(), 0, back.data(), back.size());
  CHECK(back == src);
  owner.revoke(b.id(), &tok);
  // Accepted here; the daemon refuses the copy, and the flush that covers
  // the ticket reports it (even when it is the newest ticket).
  user.upload(id, 0, src.data(), src.size());
  try {
    user.flush();
    FAIL("a revoked grant still took an upload");
  } catch (const ferry::error& e) {
    CHECK(e.code().value() == EACCES);
    CHECK(std::string(e.what()).find("ferry_flush") != std::string::npos);
  }
  CHECK(user.flush());  // reported once
}

TEST_CASE("C++: a gathered, publishing upload and the fence it moves", "[cpp][fence]") {
  Daemon d;
  ferry::Client c(d.socket);
  ferry::Buffer b(c, 4096);
  const std::vector<uint8_t> head(100, 1), tail(200, 2);
  const ferry_iovec parts[2] = {{head.data(), head.size()}, {tail.data(), tail.size()}};
  ferry_upload_opts o{};
  o.size = sizeof o;
  o.publish = 5;
  CHECK(c.wait(c.upload_gather(b.id(), 10, parts, 2, &o)));
  const ferry_fence f = c.fence(b.id());
  CHECK(ferry_fence_wait(c.get(), b.id(), 5, 5'000'000'000) == 0);
  CHECK(*f.ready == 5);
  std::vector<uint8_t> back(300);
  c.download(b.id(), 10, back.data(), back.size());
  CHECK(std::equal(head.begin(), head.end(), back.begin()));
  CHECK(std::equal(tail.begin(), tail.end(), back.begin() + 100));
  CHECK_THROWS_AS(c.fence(ferry_buffer{b.id().id + 9}), ferry::error);
}

TEST_CASE("C++: a Client used in a forked child throws ECHILD; the parent's goes on", "[cpp][fork]") {
  Daemon d;
  ferry::Client c(d.socket);
  ferry::Buffer b(c, 4096);
  const std::vector<uint8_t> v(4096, 9);
  pid_t p = fork_child([&] {
    try {
      c.upload(b.id(), 0, v.data(), v.size());
      return 90;
    } catch (const ferry::error& e) {
      return e.code().value() == ECHILD ? 0 : 91;
    }
  });
  CHECK(reap(p) == 0);
  CHECK(c.wait(c.upload(b.id(), 0, v.data(), v.size())));
}

TEST_CASE("ferry_info and ferry_timeline are versioned by size", "[abi]") {
  Daemon d;
  ferry_client* c = nullptr;
  REQUIRE(ferry_connect(d.socket.c_str(), &c) == 0);
  // Zeroed: this header's version, all of it.
  ferry_info full{};
  REQUIRE(ferry_get_info(c, &full) == 0);
  CHECK(full.size == sizeof full);
  CHECK(full.slot_count > 0);
  CHECK(full.client_id != 0);
  // An older, smaller caller: only the bytes its version holds are written.
  struct {
    ferry_info info;
    uint8_t past[8];
  } old;
  std::memset(&old, 0xAB, sizeof old);
  old.info.size = 8;  // the size word and slot_count
  REQUIRE(ferry_get_info(c, &old.info) == 0);
  CHECK(old.info.size == 8);
  CHECK(old.info.slot_count == full.slot_count);
  CHECK(old.info.client_id == 0xABABABABABABABABull);  // not its version's: untouched
  // A newer, larger caller gets this version's fields and learns how many.
  struct {
    ferry_info info;
    uint8_t future[32];
  } newer{};
  newer.info.size = sizeof newer;
  std::memset(newer.future, 0xCD, sizeof newer.future);
  REQUIRE(ferry_get_info(c, &newer.info) == 0);
  CHECK(newer.info.size == sizeof(ferry_info));
  CHECK(newer.future[0] == 0xCD);
  ferry_info tiny{};
  tiny.size = 4;
  CHECK(ferry_get_info(c, &tiny) == -EINVAL);
  ferry_timeline tl{};
  REQUIRE(ferry_get_timeline(c, &tl) == 0);
  CHECK(tl.size == sizeof tl);
  CHECK(tl.device_completed != nullptr);
  CHECK(tl.segment != nullptr);
  ferry_disconnect(c);
}

TEST_CASE("a client connected under a name shows under it; none given: the program's name", "[cpp][names]") {
  Daemon d;
  ferry::Client trainer(d.socket, "torch trainer");
  ferry::Client longer(d.socket, "a name longer than sixteen bytes");
  ferry_client* plain = nullptr;
  REQUIRE(ferry_connect_named(d.socket.c_str(), "", &plain) == 0);
  std::vector<std::string> names;
  const auto st = d.status();
  for (const auto& [k, row] : st.get_child("clients")) {
    (void)k;
    names.push_back(row.get<std::string>("name"));
  }
  std::sort(names.begin(), names.end());
  // The test program's own name, as /proc/self/comm gives it (15 bytes at most).
  CHECK(names == std::vector<std::string>{"a name longer t", "cpp_api_tests", "torch trainer"});
  ferry_disconnect(plain);
  CHECK(ferry_connect_named(d.socket.c_str(), "x", nullptr) == -EFAULT);
}
