// SPDX-License-Identifier: MIT
#include "device/mps.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <dirent.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "log.hpp"

namespace ferry::ferryd {

// Whether this process's CUDA contexts go through NVIDIA's MPS: the driver
// does so when an MPS control daemon answers at `control` in
// CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps). The file outlives the
// daemon (seen on the H200 after `quit`), so it must answer: a socket that
// accepts a connection, or a FIFO with a reader. ferryd may not see other
// users' processes (ProtectProc=invisible), so this is what it can check.
// Any user may create /tmp/nvidia-mps: the directory and the file count only
// when root or ferryd's own user owns them (never through a link), and the
// check never blocks (a listener with a full backlog is retried for at most
// a second). Otherwise ferryd reports time slicing, with a warning.
bool mps_control_present() {
  const char* env = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  const std::string dir = env != nullptr && *env != '\0' ? env : "/tmp/nvidia-mps";
  const std::string path = dir + "/control";
  const uid_t self = ::geteuid();
  auto trusted = [&](const struct stat& st) { return st.st_uid == 0 || st.st_uid == self; };
  struct stat ds{}, st{};
  if (::lstat(path.c_str(), &st) != 0) return false;
  if (::lstat(dir.c_str(), &ds) != 0 || !S_ISDIR(ds.st_mode) || !trusted(ds) || !trusted(st)) {
    FERRY_LOG(warn, "MPS: %s is not root's or ferryd's own (uid %u), or is reached through a link: ignored, as "
              "any user could have made it; reporting time slicing", path.c_str(), static_cast<unsigned>(self));
    return false;
  }
  if (S_ISFIFO(st.st_mode)) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);  // ENXIO: nobody reads it
    if (fd < 0) return false;
    ::close(fd);
    return true;
  }
  if (!S_ISSOCK(st.st_mode) || path.size() >= sizeof(sockaddr_un::sun_path)) return false;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.c_str(), path.size());
  // A SOCK_SEQPACKET socket on the H200 machine (CUDA 13); a stream socket
  // is tried too. Refused: nobody listens. Non-blocking: a full backlog is
  // EAGAIN at once, not a wait.
  bool busy = false;
  for (int type : {SOCK_SEQPACKET, SOCK_STREAM}) {
    for (int attempt = 0; attempt < 100; ++attempt) {
      const int fd = ::socket(AF_UNIX, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (fd < 0) break;
      const int r = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
      const int err = errno;
      ::close(fd);
      if (r == 0) return true;
      if (err == EAGAIN) {
        busy = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      if (err == EPROTOTYPE) break;
      return false;
    }
  }
  if (busy) FERRY_LOG(warn, "MPS: %s does not accept a connection within a second: reporting time slicing", path.c_str());
  return false;
}

namespace {

struct MpsProcess {
  std::string pid;
  bool control = false;  // nvidia-cuda-mps-control, else a server
  bool multi_user = false;
  unsigned uid = 0;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// The MPS processes visible under proc_root: the control daemon
// (nvidia-cuda-mps-control) and its servers (nvidia-cuda-mps-server); both
// have the comm "nvidia-cuda-mps" (15 characters), argv[0] tells them apart.
std::vector<MpsProcess> mps_processes(const std::string& proc_root) {
  std::vector<MpsProcess> out;
  DIR* d = ::opendir(proc_root.c_str());
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string pid = e->d_name;
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string base = proc_root + "/" + pid;
    if (slurp(base + "/comm").rfind("nvidia-cuda-mps", 0) != 0) continue;
    std::vector<std::string> argv;
    const std::string cmd = slurp(base + "/cmdline");
    for (size_t at = 0; at < cmd.size();) {
      const size_t end = cmd.find('\0', at);
      argv.push_back(cmd.substr(at, end == std::string::npos ? std::string::npos : end - at));
      if (end == std::string::npos) break;
      at = end + 1;
    }
    if (argv.empty()) continue;
    MpsProcess p;
    p.pid = pid;
    p.control = argv[0].find("mps-control") != std::string::npos;
    for (size_t i = 1; i < argv.size(); ++i) p.multi_user = p.multi_user || argv[i] == "-M";
    const std::string status = slurp(base + "/status");
    const size_t u = status.find("\nUid:");
    if (u == std::string::npos) continue;
    p.uid = static_cast<unsigned>(std::strtoul(status.c_str() + u + 5, nullptr, 10));  // the real uid
    out.push_back(p);
  }
  ::closedir(d);
  return out;
}

}  // namespace

std::string mps_user_warning(const std::string& proc_root, unsigned self) {
  const std::vector<MpsProcess> ps = mps_processes(proc_root);
  const MpsProcess* control = nullptr;
  // The control daemon is root's (a system service) or ferryd's user's own:
  // a process of another user that merely calls itself so is not taken.
  for (const MpsProcess& p : ps)
    if (p.control && (p.uid == 0 || p.uid == self)) control = &p;
  if (control == nullptr || control->multi_user) return {};
  const std::string fix =
      "; restart it as the multi-user server, `nvidia-cuda-mps-control -d -M` (ferry-mps.service does), or run "
      "ferryd and its clients as one user";
  for (const MpsProcess& p : ps) {
    if (!p.control && p.uid != self) {
      return "MPS: the control daemon (pid " + control->pid + ") runs one server per user (no -M) and serves uid " +
             std::to_string(p.uid) + " now (server pid " + p.pid + "): ferryd's CUDA context (uid " +
             std::to_string(self) + ") waits until that server exits" + fix;
    }
  }
  return "MPS: the control daemon (pid " + control->pid + ") runs one server per user (no -M): CUDA clients of " +
         "users other than ferryd's (uid " + std::to_string(self) +
         ") will wait behind ferryd's MPS server for as long as ferryd runs" + fix;
}

struct SlowWarning::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread thread;
};

SlowWarning::SlowWarning(int seconds, std::string what) : s_(std::make_unique<State>()) {
  s_->thread = std::thread([s = s_.get(), seconds, what = std::move(what)] {
    std::unique_lock lock(s->mu);
    if (!s->cv.wait_for(lock, std::chrono::seconds(seconds), [s] { return s->done; }))
      FERRY_LOG(warn, "%s", what.c_str());
  });
}

SlowWarning::~SlowWarning() {
  {
    std::lock_guard lock(s_->mu);
    s_->done = true;
  }
  s_->cv.notify_all();
  s_->thread.join();
}

// Under MPS a context waits, with no error and no end, while a per-user
// control daemon serves another user's server: said before, from what /proc
// shows, and again if the context has not come after 10 s.
std::unique_ptr<SlowWarning> guard_cuda_open(bool mps) {
  if (mps) {
    if (const std::string w = mps_user_warning("/proc", ::getuid()); !w.empty()) FERRY_LOG(warn, "%s", w.c_str());
  }
  return std::make_unique<SlowWarning>(
      10, mps ? "CUDA: no context after 10 s under MPS: a control daemon started without -M lets one user's MPS "
                "server run at a time, and ferryd's waits for another user's to exit; run `nvidia-cuda-mps-control "
                "-d -M` (ferry-mps.service does) or stop that user's CUDA programs"
              : "CUDA: no context after 10 s (the driver is still initialising the GPU?)");
}

}  // namespace ferry::ferryd
