// SPDX-License-Identifier: MIT
// Whether CUDA contexts of this process go through NVIDIA's Multi-Process
// Service (the CUDA backend reports it: status device.sharing).
#pragma once

namespace ferry::ferryd {

// True when an MPS control daemon answers in $CUDA_MPS_PIPE_DIRECTORY.
bool mps_control_present();

}  // namespace ferry::ferryd
