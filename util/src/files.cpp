// SPDX-License-Identifier: MIT
#include "ferry/util/files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>

namespace ferry::util {

int write_file_atomically(const std::string& path, const std::string& text, mode_t mode, bool keep_own,
                          std::string* what) {
  auto fail = [&](const std::string& step, int err) {
    *what = step;
    return -err;
  };
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base.empty() || base == "." || base == "..") return fail("write " + path, EISDIR);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return fail("open the directory " + dir, errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } dir_closer{dfd};
  gid_t group = static_cast<gid_t>(-1);
  struct stat st{};
  if (keep_own && ::fstatat(dfd, base.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
      st.st_uid == ::geteuid()) {
    mode = st.st_mode & 0666;
    group = st.st_gid;
  }
  std::string tmp;
  int fd = -1;
  for (int i = 0; i < 100 && fd < 0; ++i) {
    uint64_t r = 0;
    if (::getentropy(&r, sizeof r) != 0) return fail("draw a name for " + path, errno);
    char suffix[32];
    std::snprintf(suffix, sizeof suffix, ".tmp.%016llx", static_cast<unsigned long long>(r));
    tmp = "." + base + suffix;
    fd = ::openat(dfd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) return fail("create a file in " + dir, errno);
  }
  if (fd < 0) return fail("create a file in " + dir, EEXIST);
  int err = 0;
  for (size_t off = 0; err == 0 && off < text.size();) {
    const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) err = n == 0 ? EIO : errno;
    else off += static_cast<size_t>(n);
  }
  if (err == 0 && group != static_cast<gid_t>(-1)) (void)::fchown(fd, static_cast<uid_t>(-1), group);  // kept where we may
  if (err == 0 && (::fchmod(fd, mode) != 0 || ::fsync(fd) != 0)) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::renameat(dfd, tmp.c_str(), dfd, base.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlinkat(dfd, tmp.c_str(), 0);
    return fail("write " + path, err);
  }
  return 0;
}

}  // namespace ferry::util
