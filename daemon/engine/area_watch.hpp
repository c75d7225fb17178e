// SPDX-License-Identifier: MIT
// How long a staging area's memory can live: until no process holds the
// file ferryd handed its client, whoever holds it (the client, a child it
// forked, a process it passed the descriptor to) and whatever pid namespace
// ferryd runs in.
//
// ferryd makes the memfd and keeps that first file (a pseudo file: only
// ferryd holds it, the kernel reports nothing of it); the client gets a
// second file of the same memory, opened through /proc/self/fd, and then the
// memory's mode is set to 0, so that nobody but root can open a third (a
// descriptor, an O_PATH handle or /proc/PID/map_files of it is no way in:
// each open is checked against the mode). dup, fork and SCM_RIGHTS share
// the client's file; mappings hold it too; the kernel tells an inotify
// watch when its last reference goes. An area whose session ended
// (released, or its client gone) stays charged to its user until then;
// ferryd then closes its own file and the memory goes.
//
// Root (and ferryd's own user) may open more files of it; those opens and
// closes are counted too, best effort (the kernel merges identical events
// that follow each other). A flood of them that loses events keeps every
// area charged for ferryd's life, said in the log.
//
// Contract: io thread only. One inotify instance, read a few batches a
// turn at most, so no flood holds the io thread.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>

namespace ferry::ferryd {

class AreaWatch {
 public:
  // gone(id): area `id`'s memory is no one's any more (after depart(id)).
  AreaWatch(boost::asio::io_context& io, std::function<void(uint64_t id)> gone) : io_(io), gone_(std::move(gone)) {}
  ~AreaWatch();
  AreaWatch(const AreaWatch&) = delete;
  AreaWatch& operator=(const AreaWatch&) = delete;

  // Starts watching memfd `own` (ferryd's file, which this takes over) as
  // area `id`: *theirs is the file to hand the client. 0, or -errno (then
  // `own` is closed, nothing kept).
  int add(uint64_t id, int own, int* theirs);
  // Area `id` left its session: charged until no process holds a file of
  // it. `punch`: its pages are freed now (a release: the client is done).
  void depart(uint64_t id, bool punch);
  size_t watched() const { return areas_.size(); }

 private:
  struct Area {
    int own = -1;
    int wd = -1;
    uint64_t bytes = 0;
    int64_t files = 1;  // files of it open but ferryd's own: the client's, and any root opened
    bool departed = false;
  };
  void listen();
  // Reads what the kernel queued (a few batches at most: `all` reads until
  // none is left) and settles what it let go.
  void pump(bool all);
  // Its files all went after it departed: ferryd's closes, the user is told.
  void settle(uint64_t id);

  boost::asio::io_context& io_;
  std::function<void(uint64_t)> gone_;
  std::shared_ptr<boost::asio::posix::stream_descriptor> in_;  // the inotify instance, made on first use
  std::map<int, uint64_t> by_wd_;  // watch -> area id
  std::map<uint64_t, Area> areas_;
  bool lost_ = false;  // events were lost: no area settles again
};

}  // namespace ferry::ferryd
