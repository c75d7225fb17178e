// SPDX-License-Identifier: MIT
// Whether CUDA contexts of this process go through NVIDIA's Multi-Process
// Service (the CUDA backend reports it: status device.sharing).
#pragma once

#include <memory>
#include <string>

namespace ferry::ferryd {

// True when an MPS control daemon answers in $CUDA_MPS_PIPE_DIRECTORY.
bool mps_control_present();

// What the processes under proc_root (/proc) say of NVIDIA's MPS, for a
// process of uid `self` about to use it: empty when nothing is wrong or
// nothing can be seen (ferryd under ProtectProc=invisible sees no other
// user's process), else a warning that names the fix. A control daemon
// started without -M runs one server per user at a time: the CUDA contexts
// of every other user queue until that server exits (measured on the H200:
// forever, while ferryd runs). Only the multi-user server (-M) lets ferryd
// and clients of other users share the GPU.
std::string mps_user_warning(const std::string& proc_root, unsigned self);

// Logs `what` as a warning if the scope it guards has not ended after
// `seconds` (creating a CUDA context that waits behind another user's MPS
// server, say). One thread, woken early when the scope ends.
class SlowWarning {
 public:
  SlowWarning(int seconds, std::string what);
  ~SlowWarning();
  SlowWarning(const SlowWarning&) = delete;
  SlowWarning& operator=(const SlowWarning&) = delete;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Before a CUDA context is made: logs mps_user_warning("/proc", uid) when
// `mps`, and returns a guard that warns if the context has not come after
// 10 s (under MPS: the reason and the fix).
std::unique_ptr<SlowWarning> guard_cuda_open(bool mps);

}  // namespace ferry::ferryd
