// SPDX-License-Identifier: MIT
#include "net/server.hpp"

#include "net/answer.hpp"


#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <grp.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "ferry/fdpass.hpp"
#include "log.hpp"
#include "admin/status.hpp"
#include "engine/poller.hpp"
#include "net/systemd.hpp"

namespace ferry::ferryd {

namespace {
// The bound on all clients' allocations: as given, or with the simulated
// device (a descriptor per allocation) what the descriptor limit leaves
// after every connection's own (socket, segment, replies carrying one) and
// every client's doorbell.
uint64_t buffers_total(const Options& o) {
  const Limits& l = o.limits;
  if (l.max_buffers_total != 0 || !o.sim) return l.max_buffers_total;
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 0;
  const uint64_t reserve = 3ull * (l.max_connections + Limits::kAdminSeats) + (16ull + 1) * l.max_clients + 256;
  return rl.rlim_cur > reserve + 64 ? rl.rlim_cur - reserve : 64;
}
}  // namespace

namespace asio = boost::asio;
using stream = asio::local::stream_protocol;

Server::Server(asio::io_context& io, const Options& opts, std::unique_ptr<Backend> backend)
    : io_(io),
      opts_(opts),
      engine_(io, std::move(backend)),
      ctx_{.engine = engine_, .options = opts_},
      acceptor_(io),
      signals_(io, SIGTERM, SIGINT, SIGHUP),
      timer_(io),
      status_timer_(io),
      accept_pause_(io) {
  // The admins' group by number, once: no name service is asked per peer.
  if (!opts_.admin_group.empty())
    if (const group* g = ::getgrnam(opts_.admin_group.c_str())) opts_.admin_gid = g->gr_gid;
  // A share of the device's memory becomes bytes now that the device is known.
  Limits& l = opts_.limits;
  if (l.user_memory == 0 && l.user_memory_percent != 0 && l.user_memory_percent < 100)
    l.user_memory = engine_.device().memory_bytes / 100 * l.user_memory_percent;
  l.max_buffers_total = buffers_total(opts_);
  engine_.resources().set_limits(l);
  if (opts.segment_pool != 0)
    engine_.clients().use_segment_pool(opts.slots, opts.slot_bytes, opts.segment_pool);
  ctx_.stats.started_unix =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Server::~Server() { unlink_socket(); }

void Server::unlink_socket() {
  // Only the file this daemon bound: a successor that found it stale (while
  // this one drained) may have bound its own at the same path since.
  struct stat st {};
  if (owns_path_ && ::lstat(path_.c_str(), &st) == 0 && st.st_dev == bound_.st_dev && st.st_ino == bound_.st_ino)
    ::unlink(path_.c_str());
  owns_path_ = false;
}

namespace {

// Whether some process accepts connections on `path`.
bool someone_listens(const std::string& path) {
  int fd = -1;
  if (proto::connect_unix(path, &fd) != 0) return false;
  ::close(fd);
  return true;
}

}  // namespace

int Server::apply_perms(const std::string& path, std::string& why) {
  if (!opts_.socket_group.empty()) {
    group* g = ::getgrnam(opts_.socket_group.c_str());
    if (g == nullptr || ::chown(path.c_str(), static_cast<uid_t>(-1), g->gr_gid) != 0) {
      why = "cannot give " + path + " to group " + opts_.socket_group + " (--socket-group): " + std::strerror(errno);
      return -EPERM;
    }
  }
  if (::chmod(path.c_str(), opts_.socket_mode) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", opts_.socket_mode);
    why = "cannot set " + path + " to mode " + mode + " (--socket-mode): " + std::strerror(errno);
    return -EPERM;
  }
  return 0;
}

int Server::listen(const std::string& path, int fd, std::string& why) {
  path_ = path;
  if (int r = fd >= 0 ? adopt(fd, why) : bind_path(path, why); r != 0) return r;
  systemd::notify("READY=1\nSTATUS=" + status_line(engine_));
  status_tick();
  ctx_.request_stop = [this] { boost::asio::post(io_, [this] { stop(); }); };
  wait_signal();
  accept();
  return 0;
}

// A listening socket handed over (socket activation).
int Server::adopt(int fd, std::string& why) {
  boost::system::error_code ec;
  acceptor_.assign(stream(), fd, ec);
  if (ec) {
    why = "cannot adopt the socket passed in: " + ec.message();
    return -EINVAL;
  }
  // Whoever made the socket (systemd-socket-activate, a container's init)
  // may not have given it the mode and group asked for here: applied to
  // the file the socket is bound to. (systemd's own SocketMode and
  // SocketGroup need no flag: ferryd@.socket sets them.)
  if (!opts_.socket_perms_given) return 0;
  sockaddr_un a{};
  socklen_t len = sizeof a;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 || a.sun_family != AF_UNIX || a.sun_path[0] == '\0')
    return 0;
  return apply_perms(std::string(a.sun_path, ::strnlen(a.sun_path, sizeof a.sun_path)), why);
}

int Server::bind_listen(const std::string& at, std::string& why) {
  boost::system::error_code ec;
  acceptor_.open(stream(), ec);
  if (!ec) acceptor_.bind(stream::endpoint(at), ec);
  if (ec) {
    why = "cannot bind " + at + ": " + ec.message();
    return -ec.value();
  }
  int r = apply_perms(at, why);
  if (r == 0) {
    acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      why = "cannot listen on " + at + ": " + ec.message();
      r = -ec.value();
    }
  }
  if (r != 0) ::unlink(at.c_str());  // the file this bind made
  return r;
}

// A socket of ferryd's own at path: one left by a daemon that died is
// replaced, one that another daemon listens on is not. It is bound, given
// its group and mode and listening under a name of its own in the same
// folder first, then renamed into place: a socket file at `path` always
// accepts (a client, or a script that waits for the file, never meets one
// that refuses the connect while ferryd is between bind and listen).
int Server::bind_path(const std::string& path, std::string& why) {
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    why = "socket path too long: " + path;
    return -ENAMETOOLONG;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && someone_listens(path)) {
    why = "another daemon already listens on " + path;
    return -EADDRINUSE;
  }
  const std::string temp = path + ".new-" + std::to_string(::getpid());
  const bool renamed = temp.size() < sizeof(sockaddr_un::sun_path);  // else bound at path itself
  const std::string& at = renamed ? temp : path;
  ::unlink(at.c_str());  // left behind by a daemon that died (or one of this pid's, before)
  if (int r = bind_listen(at, why); r != 0) return r;
  if (renamed && ::rename(temp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    why = "cannot rename " + temp + " to " + path + ": " + std::strerror(e);
    ::unlink(temp.c_str());  // never left behind under its own name
    return -e;
  }
  owns_path_ = ::lstat(path.c_str(), &bound_) == 0;
  return 0;
}

void Server::wait_signal() {
  signals_.async_wait([this](const boost::system::error_code& e, int sig) {
    if (e) return;
    if (sig == SIGHUP) {
      // Nothing is re-read while running (a new setting needs a restart);
      // a reload must not stop the daemon.
      FERRY_LOG(info, "SIGHUP: settings are read at start only; restart ferryd to change them");
      return wait_signal();
    }
    FERRY_LOG(info, "%s: stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    stop();
  });
}

size_t Server::run() {
  // The data thread's loop, until the io_context stops.
  Poller(engine_.io(), engine_, opts_.poll_idle_us, opts_.poll_nap_us).run();
  // Every session is closed by now; the handlers still pending on their
  // sockets (a write a client never read, say) end here, while the engine
  // their client states return everything to is still alive.
  sessions_.stop_all();
  engine_.stop();
  io_.restart();
  io_.poll();
  return engine_.stats().in_flight;
}

void Server::accept() {
  acceptor_.async_accept([this](const boost::system::error_code& ec, stream::socket sock) {
    if (ec == asio::error::operation_aborted || ctx_.stopping) return;
    if (!ec) {
      ++ctx_.stats.connections;
      const std::string why = admit(sock.native_handle());
      if (!why.empty()) {
        // Closed at once, told why: connections are bounded, Hello or not.
        // A fresh socket's buffer takes the one message without blocking.
        refused(why.c_str());
        const Answer a = Answer::error(0, -EUSERS, why, true);
        (void)::send(sock.native_handle(), a.bytes.data(), a.bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        boost::system::error_code ignored;
        sock.close(ignored);
        ++ctx_.stats.refused;
      } else {
        sessions_.start(std::move(sock), ctx_);
      }
    } else if (ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space ||
               ec == asio::error::no_memory) {
      // Retrying at once would spin: wait for a session to end and free one.
      ++ctx_.stats.accept_failures;
      refused("accept: out of file descriptors; pausing 100 ms");
      accept_pause_.expires_after(std::chrono::milliseconds(100));
      accept_pause_.async_wait([this](const boost::system::error_code& e) {
        if (!e && !ctx_.stopping) accept();
      });
      return;
    }
    accept();
  });
}

std::string Server::admit(int fd) {
  const PeerCred cred = peer_cred(fd);
  if (cred.uid == static_cast<uid_t>(-1)) return "cannot tell who connects (SO_PEERCRED)";
  const Limits& l = opts_.limits;
  const size_t open = ctx_.users.sessions(), mine = ctx_.users.of(cred.uid).sessions;
  const uint64_t share = l.share_of(l.max_connections);
  if (open < l.max_connections && mine < share) return {};
  // Past a bound for users: an admin still comes in (status, disconnect,
  // drain), into seats no other user can take.
  if (open < uint64_t{l.max_connections} + Limits::kAdminSeats && is_admin(opts_, cred)) return {};
  if (open >= l.max_connections)
    return "ferryd has " + std::to_string(open) + " connections of all users (--max-connections " +
           std::to_string(l.max_connections) + ")";
  return "uid " + std::to_string(cred.uid) + " has " + std::to_string(mine) + " connections, its most of " +
         "--max-connections " + std::to_string(l.max_connections) + " (--user-share " +
         std::to_string(l.user_share) + "%)";
}

void Server::refused(const char* why) {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_refusal_log_ < std::chrono::seconds(10)) return;  // at most one line per 10 s
  last_refusal_log_ = now;
  FERRY_LOG(warn, "%s", why);
}

void Server::status_tick() {
  status_timer_.expires_after(std::chrono::seconds(2));
  status_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || ctx_.stopping) return;
    systemd::notify("STATUS=" + status_line(engine_));
    status_tick();
  });
}

void Server::stop() {
  if (ctx_.stopping) return;
  ctx_.stopping = true;
  systemd::notify("STOPPING=1\nSTATUS=stopping: draining " + std::to_string(engine_.stats().in_flight) + " copies");
  status_timer_.cancel();
  boost::system::error_code ec;
  accept_pause_.cancel();
  acceptor_.close(ec);
  signals_.cancel(ec);
  for (const auto& [id, c] : engine_.clients().all())
    if (c->connected()) c->set_daemon_state(2);
  drain_from_ = std::chrono::steady_clock::now();
  drain_deadline_ = drain_from_ + std::chrono::milliseconds(static_cast<int64_t>(opts_.drain_seconds * 1000));
  drain_tick();
}

namespace {
constexpr auto kStopGrace = std::chrono::milliseconds(50);
}  // namespace

void Server::drain_tick() {
  // Held uploads too: a data loader's next batch waits for its consumer's
  // release, which comes as the consumer goes on (ferry.torch then connects
  // to the next ferryd with nothing lost).
  // And every entry a client published is taken: a client that looked at
  // the daemon's state just before it became "stopping" may still be
  // writing its entry, so the rings are looked at for a short while after
  // the flip (kStopGrace) before they count as quiet.
  bool rings_quiet = std::chrono::steady_clock::now() >= drain_from_ + kStopGrace;
  for (const auto& [id, c] : engine_.clients().all())
    if (c->connected() && engine_.last_published(c->shared_from_this()) >= c->window().next()) rings_quiet = false;
  const bool drained = engine_.stats().in_flight == 0 && !engine_.holding() && rings_quiet;
  if (!drained && std::chrono::steady_clock::now() < drain_deadline_) {
    timer_.expires_after(std::chrono::milliseconds(5));
    timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) drain_tick();
    });
    return;
  }
  if (!drained)
    FERRY_LOG(warn, "stopping with %u copies still in flight%s", engine_.stats().in_flight,
              engine_.holding() ? " and uploads held for their values (they fail)" : "");
  sessions_.shut_down_all();
  // Give the Shutdown messages a moment to leave, then end.
  timer_.expires_after(std::chrono::milliseconds(100));
  timer_.async_wait([this](const boost::system::error_code&) {
    sessions_.stop_all();
    io_.stop();
  });
}

}  // namespace ferry::ferryd
