# SPDX-License-Identifier: MIT
"""Unmodified CuPy programs for ferry-run's measurements (bench/run_gpu.sh
runs each plain and under ferry-run, side by side). Each prints one line per
size: the median GB/s of 6 timed calls after a warm one, and how many
arrived wrong (the device's sum against the host's).

  memcpy SIZE...   cupy.cuda.runtime.memcpy from a pageable NumPy array
                   (cudaMemcpy, host to device: blocking)
  asarray SIZE...  cupy.asarray(numpy_array): CuPy copies the array into its
                   pinned pool, then uploads from there
  set SIZE...      ndarray.set(numpy_array) into an array made once
"""
import statistics
import sys
import time

import cupy
import numpy


def run(what, n):
    src = numpy.random.default_rng(n).integers(0, 255, n, dtype=numpy.uint8)
    dst = cupy.empty(n, dtype=cupy.uint8)
    rates, wrong = [], 0
    for i in range(7):
        src[i] = (i * 37) % 251
        want = int(src.sum(dtype=numpy.int64))
        cupy.cuda.runtime.deviceSynchronize()
        t0 = time.perf_counter()
        if what == "memcpy":
            cupy.cuda.runtime.memcpy(dst.data.ptr, src.ctypes.data, n, cupy.cuda.runtime.memcpyHostToDevice)
            got = dst
        elif what == "asarray":
            got = cupy.asarray(src)
        else:
            dst.set(src)
            got = dst
        cupy.cuda.runtime.deviceSynchronize()
        t1 = time.perf_counter()
        wrong += int(int(got.sum(dtype=cupy.int64)) != want)
        if i > 0:
            rates.append(n / (t1 - t0) / 1e9)
    print(f"cupy {what} size={n} gbps={statistics.median(rates):.2f} min={min(rates):.2f} max={max(rates):.2f} "
          f"wrong={wrong}")
    sys.stdout.flush()
    return wrong


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("memcpy", "asarray", "set"):
        print(__doc__)
        return 2
    wrong = sum(run(sys.argv[1], int(s)) for s in sys.argv[2:])
    return 0 if wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
