#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds what bench/gpu.sh needs (Release, CUDA backend, benchmarks, tests) and
# copies the binaries into .device/, laid out as a build tree. libferry reads
# its staging constants from the environment (FERRY_TUNING_ENV) so the tuning
# scripts can vary them; unset, they are the shipped defaults.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build/cuda
CUDACXX=${CUDACXX:-/usr/local/cuda/bin/nvcc} bash "$root/scripts/build.sh" "$build" -DCMAKE_BUILD_TYPE=Release -DFERRY_CUDA=ON \
  -DFERRY_CUDA_BENCH=ON -DFERRY_BUILD_BENCH=ON -DFERRY_BUILD_TESTS=ON -DFERRY_TUNING_ENV=ON >/dev/null
rm -rf "$root/.device"
for f in daemon/ferryd tools/ferryctl client/libferry.so.0 tests/upload_tests tests/ring_tests tests/reliability_tests tests/sharing_tests tests/cpp_api_tests tests/ordering_tests tests/fence_tests tests/fork_tests tests/producer_client \
  examples/multi_upload bench/flood_bench bench/cuda_bench bench/link_check bench/submit_probe bench/cuda_ipc_check bench/loader_bench \
  interpose/ferry-run interpose/libferry_run_core.so.0 interpose/libferry_ze_run.so.1 interpose/libferry_cuda_run.so \
  bench/run_cuda_check_static bench/run_cuda_check_shared bench/run_cuda_check_ptds bench/seed_loop bench/seed_loop_shared; do
  mkdir -p "$root/.device/$(dirname "$f")"
  cp -L "$build/$f" "$root/.device/$f"
done
# sharing_tests links the Level Zero loader (the GPU machine has none); only its grant tests run there.
mkdir -p "$root/.device/lib"
cp -L /usr/lib/x86_64-linux-gnu/libze_loader.so.1 "$root/.device/lib/"
# The Python package and the loader benchmark of this build, so that bench/gpu.sh
# runs ferry.torch of each pack against its own libferry (before/after).
mkdir -p "$root/.device/tree/bench"
cp -r "$root/python" "$root/.device/tree/"
cp "$root/bench/torch_loader_bench.py" "$root/bench/run_torch.py" "$root/bench/run_cupy.py" "$root/bench/run_gpu.sh" "$root/.device/tree/bench/"
git -C "$root" describe --always --dirty >"$root/.device/COMMIT"
du -sh "$root/.device"
