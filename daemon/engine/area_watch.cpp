// SPDX-License-Identifier: MIT
#include "engine/area_watch.hpp"

#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <cerrno>
#include <string>
#include <vector>

#include "log.hpp"

namespace ferry::ferryd {

using boost::asio::posix::stream_descriptor;

AreaWatch::~AreaWatch() {
  if (in_) {
    boost::system::error_code ec;
    in_->close(ec);  // its handler sees operation_aborted
  }
  for (auto& [id, a] : areas_) ::close(a.own);
}

int AreaWatch::add(uint64_t id, int own, int* theirs) {
  *theirs = -1;
  if (!in_) {
    const int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd >= 0) {
      in_ = std::make_shared<stream_descriptor>(io_, fd);
      listen();
    }
  }
  const std::string path = "/proc/self/fd/" + std::to_string(own);
  struct stat st {};
  // The client's file first (no watch yet: not counted as an open), then
  // the watch, then the mode that lets nobody but root open another.
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  const int wd = fd < 0 || !in_ ? -1 : ::inotify_add_watch(in_->native_handle(), path.c_str(), IN_OPEN | IN_CLOSE);
  if (wd < 0 || ::fchmod(own, 0) != 0 || ::fstat(own, &st) != 0) {
    const int e = errno != 0 ? -errno : -EIO;
    if (wd >= 0) ::inotify_rm_watch(in_->native_handle(), wd);
    if (fd >= 0) ::close(fd);
    ::close(own);
    return e;
  }
  by_wd_[wd] = id;
  Area& a = areas_[id];
  a.own = own;
  a.wd = wd;
  a.bytes = static_cast<uint64_t>(st.st_size);
  *theirs = fd;
  return 0;
}

void AreaWatch::depart(uint64_t id, bool punch) {
  auto it = areas_.find(id);
  if (it == areas_.end()) return;
  Area& a = it->second;
  a.departed = true;
  // Released: the pages go now; a mapping still there reads zeros (and what
  // it faults in again stays charged until its file goes).
  if (punch) ::fallocate(a.own, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(a.bytes));
  // Every close so far is queued already (the kernel queues them as they
  // happen): read them now, so that the count is today's.
  pump(true);
  if (auto again = areas_.find(id); again != areas_.end() && again->second.files <= 0 && !lost_) settle(id);
}

void AreaWatch::listen() {
  auto d = in_;
  d->async_wait(stream_descriptor::wait_read, [this, d](const boost::system::error_code& ec) {
    if (ec || d != in_) return;  // closed: this instance is done
    pump(false);
    // What a burst left unread waits for the next turn: others first.
    boost::asio::post(io_, [this, d] {
      if (d == in_) listen();
    });
  });
}

void AreaWatch::pump(bool all) {
  if (!in_) return;
  std::vector<uint64_t> done;  // departed areas whose last file went
  for (int batch = 0; all || batch < 4; ++batch) {
    alignas(inotify_event) char buf[16 * 1024];
    const ssize_t n = ::read(in_->native_handle(), buf, sizeof buf);
    if (n <= 0) break;
    for (size_t at = 0; at + sizeof(inotify_event) <= static_cast<size_t>(n);) {
      const auto* e = reinterpret_cast<const inotify_event*>(buf + at);
      at += sizeof(inotify_event) + e->len;
      if ((e->mask & IN_Q_OVERFLOW) && !lost_) {
        // Some opens or closes went untold (a flood by root, or by ferryd's
        // own user): no count can be trusted, so areas stay charged.
        lost_ = true;
        FERRY_LOG(warn, "staging areas: inotify events were lost (a flood of opens by a privileged process); the "
                        "areas that leave their sessions stay charged until ferryd restarts");
        continue;
      }
      auto w = by_wd_.find(e->wd);
      if (w == by_wd_.end()) continue;
      Area& a = areas_[w->second];
      if (e->mask & IN_OPEN) ++a.files;
      if (e->mask & (IN_CLOSE_WRITE | IN_CLOSE_NOWRITE)) --a.files;
      if (a.departed && a.files <= 0 && !lost_) done.push_back(w->second);
    }
  }
  for (uint64_t id : done) settle(id);
}

void AreaWatch::settle(uint64_t id) {
  auto it = areas_.find(id);
  if (it == areas_.end()) return;
  const Area a = it->second;
  areas_.erase(it);
  by_wd_.erase(a.wd);
  if (in_) ::inotify_rm_watch(in_->native_handle(), a.wd);
  ::close(a.own);
  gone_(id);
}

}  // namespace ferry::ferryd
