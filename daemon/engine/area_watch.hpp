// SPDX-License-Identifier: MIT
// How long a staging area's memory can live: until no process holds a file
// of it any more, whoever that is (the client, a child it forked, a process
// it passed the descriptor to) and whatever pid namespace ferryd runs in.
//
// ferryd keeps the memfd it made (a pseudo file, which only ferryd holds:
// it is never sent) and hands the client a second file of the same memory,
// opened through /proc/self/fd. Every other file of that memory is opened
// the same way, and the kernel tells each open and each last close of a
// file (its last descriptor and its last mapping gone) to an inotify watch
// on the memory's inode: the count of open files is exact. An area whose
// session ended (released, or its client gone) stays charged to its user
// until that count is 0; then ferryd closes its own file and the memory
// goes. A user who floods the watch (opening and closing by the thousand,
// so that events are lost) keeps its areas charged for ferryd's life: its
// own quota, nobody else's.
//
// Contract: io thread only. One inotify instance per user (another user's
// flood loses none of its events), or a shared one past the system's
// limit of instances.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>

namespace ferry::ferryd {

class AreaWatch {
 public:
  // gone(id): area `id`'s memory is no one's any more (after depart(id)).
  AreaWatch(boost::asio::io_context& io, std::function<void(uint64_t id)> gone) : io_(io), gone_(std::move(gone)) {}
  ~AreaWatch();
  AreaWatch(const AreaWatch&) = delete;
  AreaWatch& operator=(const AreaWatch&) = delete;

  // Starts counting the files of memfd `own` (ferryd's, which this takes
  // over) of user `uid`, area `id`: *theirs is the file to hand the client.
  // 0, or -errno (then `own` is closed, nothing kept).
  int add(uid_t uid, uint64_t id, int own, int* theirs);
  // Area `id` left its session: charged until its count of files is 0.
  // `punch`: its pages are freed now (a release: the client says it is done).
  void depart(uint64_t id, bool punch);
  size_t watched() const { return areas_.size(); }
  size_t departed() const;

 private:
  struct Area {
    uid_t uid = 0;
    int own = -1;
    int wd = -1;
    uint64_t bytes = 0;
    int64_t files = 1;       // files of it open, other than ferryd's own (the client's, at first)
    bool departed = false;
    bool lost = false;       // events were lost: charged for ferryd's life
  };
  struct Instance {
    std::shared_ptr<boost::asio::posix::stream_descriptor> d;
    std::map<int, uint64_t> by_wd;  // watch -> area id
  };
  // The user's instance (made on first use), or the shared one: its key too.
  std::pair<uid_t, Instance*> instance(uid_t uid);
  void listen(uid_t uid, std::shared_ptr<boost::asio::posix::stream_descriptor> d);
  // Reads the instance's queued events and settles what they let go.
  void pump(uid_t uid);
  // Its count reached 0 after it departed: ferryd's file closes, the user is told.
  void settle(uint64_t id);

  boost::asio::io_context& io_;
  std::function<void(uint64_t)> gone_;
  std::map<uid_t, Instance> instances_;  // kShared for users past the limit
  std::map<uint64_t, Area> areas_;
  static constexpr uid_t kShared = static_cast<uid_t>(-1);
};

}  // namespace ferry::ferryd
