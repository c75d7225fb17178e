#include "server.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <sstream>

#include "ferry/fdpass.hpp"
#include "log.hpp"
#include "session.hpp"
#include "systemd.hpp"

namespace ferry {

namespace asio = boost::asio;
using stream = asio::local::stream_protocol;

Server::Server(asio::io_context& io, const Options& opts, std::unique_ptr<Backend> backend)
    : io_(io),
      opts_(opts),
      engine_(io, std::move(backend)),
      acceptor_(io),
      signals_(io, SIGTERM, SIGINT),
      timer_(io),
      status_timer_(io) {
  engine_.on_progress = [](ClientState& c, const std::vector<std::pair<uint64_t, int>>& failed) {
    if (auto s = c.session.lock()) {
      s->progress(failed);
    } else {
      // The client is gone; keep its segment's counters true all the same.
      proto::Segment* seg = c.segment().header();
      if (!failed.empty()) seg->failures.fetch_add(failed.size(), std::memory_order_release);
      seg->completed.store(c.completed(), std::memory_order_release);
    }
  };
}

Server::~Server() {
  if (owns_path_) ::unlink(path_.c_str());
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

int Server::listen(const std::string& path, int fd, std::string& why) {
  boost::system::error_code ec;
  path_ = path;
  if (fd >= 0) {
    acceptor_.assign(stream(), fd, ec);
    if (ec) {
      why = "cannot adopt the socket passed in: " + ec.message();
      return -EINVAL;
    }
  } else {
    if (path.size() >= sizeof(sockaddr_un::sun_path)) {
      why = "socket path too long: " + path;
      return -ENAMETOOLONG;
    }
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {
      if (someone_listens(path)) {
        why = "another daemon already listens on " + path;
        return -EADDRINUSE;
      }
      ::unlink(path.c_str());  // left behind by a daemon that died
    }
    acceptor_.open(stream(), ec);
    if (!ec) acceptor_.bind(stream::endpoint(path), ec);
    if (ec) {
      why = "cannot bind " + path + ": " + ec.message();
      return -ec.value();
    }
    owns_path_ = true;
    if (!opts_.socket_group.empty()) {
      group* g = ::getgrnam(opts_.socket_group.c_str());
      if (g == nullptr || ::chown(path.c_str(), static_cast<uid_t>(-1), g->gr_gid) != 0) {
        why = "cannot give " + path + " to group " + opts_.socket_group;
        return -EPERM;
      }
    }
    ::chmod(path.c_str(), opts_.socket_mode);
    acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      why = "cannot listen on " + path + ": " + ec.message();
      return -ec.value();
    }
  }
  systemd::notify("READY=1\nSTATUS=" + status_line());
  status_tick();
  signals_.async_wait([this](const boost::system::error_code& e, int sig) {
    if (e) return;
    FERRY_LOG(info, "%s: stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    stop();
  });
  accept();
  return 0;
}

void Server::run() { io_.run(); }

void Server::accept() {
  acceptor_.async_accept([this](const boost::system::error_code& ec, stream::socket sock) {
    if (ec == asio::error::operation_aborted || stopping_) return;
    if (!ec) {
      ++connections_;
      auto s = std::make_shared<Session>(std::move(sock), *this);
      sessions_.insert(s);
      s->start();
    } else if (ec == asio::error::no_descriptors) {
      FERRY_LOG(warn, "accept: out of file descriptors");
    }
    accept();
  });
}

size_t Server::client_count() const {
  size_t n = 0;
  for (const auto& s : sessions_)
    if (s->client()) ++n;
  return n;
}

void Server::closed(const std::shared_ptr<Session>& s) {
  if (s->client()) {
    const auto& c = *s->client();
    FERRY_LOG(info, "client %llu (pid %d) gone; %u copies still in flight", static_cast<unsigned long long>(c.id()),
              s->peer_pid(), c.in_flight());
  }
  sessions_.erase(s);
}

void Server::status_tick() {
  status_timer_.expires_after(std::chrono::seconds(2));
  status_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopping_) return;
    systemd::notify("STATUS=" + status_line());
    status_tick();
  });
}

std::string Server::status_line() const {
  uint64_t slots = 0, busy = 0;
  for (const auto& s : sessions_)
    if (s->client()) slots += s->client()->slot_count(), busy += s->client()->in_flight();
  const auto& st = engine_.stats();
  return std::to_string(client_count()) + " clients, " + std::to_string(busy) + "/" + std::to_string(slots) +
         " slots in flight, " + std::to_string(st.uploads) + " uploads" +
         (engine_.device_lost() ? ", DEVICE LOST" : "");
}

void Server::stop() {
  if (stopping_) return;
  stopping_ = true;
  systemd::notify("STOPPING=1\nSTATUS=stopping: draining " + std::to_string(engine_.stats().in_flight) + " copies");
  status_timer_.cancel();
  boost::system::error_code ec;
  acceptor_.close(ec);
  signals_.cancel(ec);
  for (const auto& s : sessions_)
    if (s->client()) s->client()->segment().header()->daemon_state.store(2, std::memory_order_release);
  drain_deadline_ = std::chrono::steady_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(opts_.drain_seconds * 1000));
  drain_tick();
}

void Server::drain_tick() {
  const bool drained = engine_.stats().in_flight == 0;
  if (!drained && std::chrono::steady_clock::now() < drain_deadline_) {
    timer_.expires_after(std::chrono::milliseconds(5));
    timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) drain_tick();
    });
    return;
  }
  if (!drained)
    FERRY_LOG(warn, "stopping with %u copies still in flight", engine_.stats().in_flight);
  auto all = sessions_;
  for (const auto& s : all) s->shut_down();
  // Give the Shutdown messages a moment to leave, then end.
  timer_.expires_after(std::chrono::milliseconds(100));
  timer_.async_wait([this](const boost::system::error_code&) {
    auto left = sessions_;
    for (const auto& s : left) s->close();
    io_.stop();
  });
}

namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      out += buf;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "\"";
}

// {"bounds_ns":[...],"counts":[...],"count":n,"sum_ns":s}; counts per bucket, the last one above every bound.
std::string histogram_json(const Histogram& h) {
  std::ostringstream o;
  o << "{\"bounds_ns\":[";
  for (size_t i = 0; i + 1 < proto::kLatencyBuckets; ++i) o << (i ? "," : "") << proto::kLatencyBoundsNs[i];
  o << "],\"counts\":[";
  for (size_t i = 0; i < proto::kLatencyBuckets; ++i) o << (i ? "," : "") << h.buckets[i];
  o << "],\"count\":" << h.count << ",\"sum_ns\":" << h.sum_ns << "}";
  return o.str();
}

int64_t unix_seconds(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

}  // namespace

bool Server::is_admin(uid_t uid, gid_t gid) const {
  if (uid == 0 || uid == ::geteuid()) return true;
  if (opts_.admin_group.empty()) return false;
  group* g = ::getgrnam(opts_.admin_group.c_str());
  if (g == nullptr) return false;
  if (gid == g->gr_gid) return true;
  passwd* pw = ::getpwuid(uid);
  if (pw == nullptr) return false;
  for (char** m = g->gr_mem; m != nullptr && *m != nullptr; ++m)
    if (std::strcmp(*m, pw->pw_name) == 0) return true;
  return false;
}

std::string Server::status_json(uid_t viewer, gid_t viewer_gid) const {
  const DeviceInfo& info = const_cast<TransferEngine&>(engine_).backend().info();
  const EngineStats& st = engine_.stats();
  const bool all = is_admin(viewer, viewer_gid);
  uint64_t slots_total = 0, slots_busy = 0;
  std::ostringstream clients;
  bool first = true;
  for (const auto& s : sessions_) {
    const auto& c = s->client();
    if (!c) continue;
    slots_total += c->slot_count();
    slots_busy += c->in_flight();
    if (!all && c->uid != viewer) continue;
    auto& cs = const_cast<ClientState&>(*c).stats();
    clients << (first ? "" : ",") << "{\"id\":" << c->id() << ",\"pid\":" << c->pid << ",\"uid\":" << c->uid
            << ",\"name\":" << json_string(c->name) << ",\"slots\":" << c->slot_count()
            << ",\"slots_in_flight\":" << c->in_flight() << ",\"bytes_in_flight\":" << c->in_flight_bytes()
            << ",\"buffers\":" << c->buffer_count() << ",\"device_bytes\":" << c->device_bytes()
            << ",\"uploads\":" << cs.uploads << ",\"upload_bytes\":" << cs.upload_bytes
            << ",\"downloads\":" << cs.downloads << ",\"errors\":" << cs.errors
            << ",\"completed\":" << c->completed() << ",\"connected_since\":" << unix_seconds(c->since) << "}";
    first = false;
  }
  std::ostringstream o;
  o << "{\"version\":" << json_string(FERRY_VERSION) << ",\"pid\":" << ::getpid()
    << ",\"started\":" << unix_seconds(started_) << ",\"device\":{\"index\":" << opts_.device
    << ",\"backend\":" << json_string(info.backend) << ",\"name\":" << json_string(info.name)
    << ",\"driver\":" << json_string(info.driver) << ",\"memory_bytes\":" << info.memory_bytes
    << ",\"copy_engine\":" << (info.copy_engine ? "true" : "false")
    << ",\"host_import\":" << (info.host_import ? "true" : "false")
    << ",\"lost\":" << (engine_.device_lost() ? "true" : "false") << "},\"ring\":{\"slot_bytes\":"
    << opts_.slot_bytes << ",\"slots_per_client\":" << opts_.slots << ",\"max_clients\":" << opts_.max_clients
    << ",\"slots_total\":" << slots_total << ",\"slots_in_flight\":" << slots_busy
    << ",\"slots_free\":" << (slots_total - slots_busy) << ",\"bytes_in_flight\":" << st.in_flight_bytes
    << "},\"totals\":{\"uploads\":" << st.uploads << ",\"upload_bytes\":" << st.upload_bytes
    << ",\"downloads\":" << st.downloads << ",\"failed\":" << st.failed << ",\"connections\":" << connections_
    << "},\"held\":{\"clients\":" << ClientState::live.load() << ",\"buffers\":" << Buffer::live_count.load()
    << ",\"device_bytes\":" << Buffer::live_bytes.load() << ",\"copies_in_flight\":" << st.in_flight
    << "},\"clients\":[" << clients.str() << "],\"all_clients_visible\":" << (all ? "true" : "false");
  Histogram waits = departed_slot_waits();
  for (const auto& s : sessions_)
    if (s->client()) add_slot_waits(s->client()->segment(), waits);
  o << ",\"histograms\":{\"upload_latency\":" << histogram_json(st.upload_latency)
    << ",\"slot_wait\":" << histogram_json(waits) << "}}";
  return o.str();
}

}  // namespace ferry
