// SPDX-License-Identifier: MIT
// A small file written whole or not at all, into a directory that other
// users may be able to write (a textfile collector's, /run/ferry).
#pragma once

#include <sys/types.h>

#include <string>

namespace ferry::util {

// Writes `text` to `path` atomically: a reader sees the old file or the new
// one, never half. Nothing in the directory is trusted: the bytes go to a new
// file of a random name created there with O_EXCL|O_NOFOLLOW (a planted link
// or FIFO is never opened), fsynced, then renamed over `path` (which replaces
// a link or FIFO at that name, never what it points at). The new file gets
// `mode`; with `keep_own`, a regular file of this user's already at `path`
// keeps its read and write bits and its group instead (another user's never
// lends its mode). 0, or -errno with *what naming the step that failed.
int write_file_atomically(const std::string& path, const std::string& text, mode_t mode, bool keep_own,
                          std::string* what);

}  // namespace ferry::util
