// SPDX-License-Identifier: MIT
// Whether ferry stages a copy or leaves it to the driver, and why: one pure
// function over what the interposer found out about the copy, so that every
// case is decided in one place and tested as a table (tests/run_tests.cpp).
#pragma once

#include <ferry/ferry.h>

#include <cstdint>

namespace ferry::run {

// What a pointer is to the driver.
enum class Mem {
  pageable,  // ordinary host memory the driver knows nothing of: read when the copy runs
  pinned,    // host memory the driver already copies from at full speed (pinned, registered, its own host memory)
  device,    // device (or managed/shared) memory
  other,     // anything else (an array, memory of another context, unknown)
};

struct Copy {
  uint64_t bytes = 0;
  uint64_t min_bytes = 0;  // Settings: below it, the driver's own path is as fast
  Mem src = Mem::other;
  Mem dst = Mem::other;
  // FERRY_PASS_CAPTURED, _REPLAYABLE or _UNSUPPORTED when the queue cannot
  // take a staged copy; -1 when it can.
  int queue = -1;
};

struct Verdict {
  bool stage = false;
  int why = -1;  // FERRY_PASS_* when not staged
};

// The cheap part first: a small copy is decided before anything is looked up.
inline bool small(uint64_t bytes, uint64_t min_bytes) { return bytes < min_bytes; }

Verdict decide(const Copy& c);

}  // namespace ferry::run
