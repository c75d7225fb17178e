// SPDX-License-Identifier: MIT
// The steps every staged copy takes, CUDA's and Level Zero's alike, once
// the interposer knows what the copy is: the policy's verdict, a lane for
// its queue, the upload through the queue's ops, the lane handed back and
// the copy counted (staged, or passed by with its reason).
#pragma once

#include <ferry/ferry.h>

#include <cstdint>

#include "lanes.hpp"
#include "policy.hpp"

namespace ferry::run {

// The queue a copy goes on, as Lanes::acquire takes it.
struct Queue {
  uint64_t id = 0;       // the stream or command list (a per-thread stream: per thread)
  uint64_t context = 0;  // what, beside id, tells two queues apart (CUDA's context)
  uint64_t key = 0;      // prepare()'s key
  Prepare prepare = nullptr;
  Unprepare unprepare = nullptr;
  void* arg = nullptr;   // prepare()'s and unprepare()'s
  Lanes::Clock::duration connect_wait = Lanes::kConnectWait;
};

// Run with the lane's client before the upload (what the backend needs of
// it: its timeline word, a stream synchronised): 0, or an errno (negative).
using BeforeUpload = int (*)(ferry_client* c, void* arg);

// stage()'s answer when the copy was staged; otherwise it is the
// FERRY_PASS_* reason, counted, and the caller makes the driver's own copy.
inline constexpr int kStaged = -1;

// Stages `facts.bytes` from src on q with ops (ctx, copy, write and flags
// set; queue and queue_context are q's). `before` may be null.
int stage(const Copy& facts, const Queue& q, const void* src, ferry_direct_ops ops, BeforeUpload before = nullptr,
          void* before_arg = nullptr);

}  // namespace ferry::run
