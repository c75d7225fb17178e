// SPDX-License-Identifier: MIT
#include "engine/area_watch.hpp"

#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "log.hpp"

namespace ferry::ferryd {

using boost::asio::posix::stream_descriptor;

AreaWatch::~AreaWatch() {
  for (auto& [uid, in] : instances_) {
    boost::system::error_code ec;
    in.d->close(ec);  // its handler sees operation_aborted
  }
  for (auto& [id, a] : areas_) ::close(a.own);
}

std::pair<uid_t, AreaWatch::Instance*> AreaWatch::instance(uid_t uid) {
  for (uid_t who : {uid, kShared}) {
    if (auto it = instances_.find(who); it != instances_.end()) return {who, &it->second};
    const int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0) continue;  // past fs.inotify.max_user_instances: the shared one
    auto d = std::make_shared<stream_descriptor>(io_, fd);
    Instance& in = instances_[who];
    in.d = d;
    listen(who, d);
    return {who, &in};
  }
  return {kShared, nullptr};
}

int AreaWatch::add(uid_t uid, uint64_t id, int own, int* theirs) {
  *theirs = -1;
  struct stat st {};
  const auto [who, in] = instance(uid);
  const std::string path = "/proc/self/fd/" + std::to_string(own);
  const int wd = in == nullptr ? -1 : ::inotify_add_watch(in->d->native_handle(), path.c_str(), IN_OPEN | IN_CLOSE);
  // The watch first, then the client's file: every open after it is seen.
  const int fd = wd < 0 ? -1 : ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (wd < 0 || fd < 0 || ::fstat(own, &st) != 0) {
    const int e = errno != 0 ? -errno : -EIO;
    if (fd >= 0) ::close(fd);
    if (wd >= 0) ::inotify_rm_watch(in->d->native_handle(), wd);
    ::close(own);
    return e;
  }
  in->by_wd[wd] = id;
  Area& a = areas_[id];
  a.uid = who;
  a.own = own;
  a.wd = wd;
  a.bytes = static_cast<uint64_t>(st.st_size);
  a.files = 0;  // the open above is counted as its event is read, as every other
  *theirs = fd;
  return 0;
}

void AreaWatch::depart(uint64_t id, bool punch) {
  auto it = areas_.find(id);
  if (it == areas_.end()) return;
  Area& a = it->second;
  a.departed = true;
  // Released: the pages go now; a mapping still there reads zeros (and
  // what it writes again stays charged until the last file goes).
  if (punch) ::fallocate(a.own, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(a.bytes));
  // Every open and close so far is queued already (the kernel queues them
  // as they happen): read them now, so that the count is today's.
  pump(a.uid);
  if (auto again = areas_.find(id); again != areas_.end() && again->second.files <= 0 && !again->second.lost)
    settle(id);
}

size_t AreaWatch::departed() const {
  size_t n = 0;
  for (const auto& [id, a] : areas_) n += a.departed ? 1 : 0;
  return n;
}

void AreaWatch::listen(uid_t uid, std::shared_ptr<stream_descriptor> d) {
  stream_descriptor& s = *d;
  s.async_wait(stream_descriptor::wait_read, [this, uid, d = std::move(d)](const boost::system::error_code& ec) mutable {
    if (ec) return;  // closed: this instance is done
    pump(uid);
    if (auto in = instances_.find(uid); in != instances_.end() && in->second.d == d) listen(uid, std::move(d));
  });
}

void AreaWatch::pump(uid_t uid) {
  std::vector<uint64_t> done;  // departed areas whose count reached 0
  for (;;) {
    auto in = instances_.find(uid);
    if (in == instances_.end()) return;
    alignas(inotify_event) char buf[16 * 1024];
    const ssize_t n = ::read(in->second.d->native_handle(), buf, sizeof buf);
    if (n <= 0) break;
    for (size_t at = 0; at + sizeof(inotify_event) <= static_cast<size_t>(n);) {
      const auto* e = reinterpret_cast<const inotify_event*>(buf + at);
      at += sizeof(inotify_event) + e->len;
      if (e->mask & IN_Q_OVERFLOW) {
        // Some opens or closes went untold: no count of this instance can
        // be trusted, so its areas stay charged as long as ferryd runs.
        FERRY_LOG(warn, "staging areas: inotify events lost (a flood of opens); the areas of %s stay charged "
                        "until ferryd restarts",
                  uid == kShared ? "the shared watch" : ("uid " + std::to_string(uid)).c_str());
        for (auto& [wd, id] : in->second.by_wd) areas_[id].lost = true;
        continue;
      }
      auto w = in->second.by_wd.find(e->wd);
      if (w == in->second.by_wd.end()) continue;
      Area& a = areas_[w->second];
      if (e->mask & IN_OPEN) ++a.files;
      if (e->mask & (IN_CLOSE_WRITE | IN_CLOSE_NOWRITE)) --a.files;
      if (a.departed && a.files <= 0 && !a.lost) done.push_back(w->second);
    }
  }
  for (uint64_t id : done) settle(id);
}

void AreaWatch::settle(uint64_t id) {
  auto it = areas_.find(id);
  if (it == areas_.end()) return;
  const Area a = it->second;
  areas_.erase(it);
  if (auto in = instances_.find(a.uid); in != instances_.end()) {
    ::inotify_rm_watch(in->second.d->native_handle(), a.wd);
    in->second.by_wd.erase(a.wd);
    if (in->second.by_wd.empty()) {  // the user's last area: its instance goes
      boost::system::error_code ec;
      in->second.d->close(ec);
      instances_.erase(in);
    }
  }
  ::close(a.own);
  gone_(id);
}

}  // namespace ferry::ferryd
