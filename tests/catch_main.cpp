// SPDX-License-Identifier: MIT
// Catch2's main, in its own file (it compiles slowly). Before any test runs,
// it points the Level Zero loader at the simulated driver, with the
// validation layer checking every call, and sets the simulated device's
// costs low so tests run fast (tests that need costs set their own).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "paths.hpp"

int main(int argc, char** argv) {
  // On a real GPU run (FERRY_TEST_BACKEND=cuda), a machine without the
  // driver reports the whole run as skipped (ctest: SKIP_RETURN_CODE 77).
  const char* backend = std::getenv("FERRY_TEST_BACKEND");
  if (backend != nullptr && std::string(backend) == "cuda" && dlopen("libcuda.so.1", RTLD_NOW) == nullptr) {
    std::printf("skipped: FERRY_TEST_BACKEND=cuda but no NVIDIA driver (libcuda.so.1) on this machine\n");
    return 77;
  }
  const std::string sim = ferry::test::build_path("sim/libze_ferry_sim.so.1");
  setenv("ZE_ENABLE_ALT_DRIVERS", sim.c_str(), 1);
  setenv("ZE_ENABLE_VALIDATION_LAYER", "1", 1);
  setenv("ZE_ENABLE_PARAMETER_VALIDATION", "1", 1);
  setenv("ZE_ENABLE_HANDLE_LIFETIME", "1", 1);
  setenv("ZE_ENABLE_THREADING_VALIDATION", "1", 1);
  setenv("FERRY_SIM_DRIVER", sim.c_str(), 1);
  setenv("FERRY_SIM_LATENCY_US", "0", 0);
  setenv("FERRY_SIM_BANDWIDTH_GBPS", "0", 0);
  setenv("FERRY_SIM_PAGEABLE_US", "20", 0);
  return Catch::Session().run(argc, argv);
}
