// Catch2's main, in its own file (it compiles slowly). Before any test runs,
// it points the Level Zero loader at the simulated driver, with the
// validation layer checking every call, and sets the simulated device's
// costs low so tests run fast (tests that need costs set their own).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdlib>

int main(int argc, char** argv) {
  setenv("ZE_ENABLE_ALT_DRIVERS", FERRY_SIM_PATH, 1);
  setenv("ZE_ENABLE_VALIDATION_LAYER", "1", 1);
  setenv("ZE_ENABLE_PARAMETER_VALIDATION", "1", 1);
  setenv("FERRY_SIM_DRIVER", FERRY_SIM_PATH, 1);
  setenv("FERRY_SIM_LATENCY_US", "0", 0);
  setenv("FERRY_SIM_BANDWIDTH_GBPS", "0", 0);
  setenv("FERRY_SIM_PAGEABLE_US", "20", 0);
  return Catch::Session().run(argc, argv);
}
