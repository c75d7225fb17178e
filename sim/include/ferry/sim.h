/* SPDX-License-Identifier: MIT */
/* ferry simulated Level Zero device: names a program needs to use it.
 *
 * The simulated driver is a Level Zero driver library (libze_ferry_sim.so)
 * loaded by the system loader when ZE_ENABLE_ALT_DRIVERS names its absolute
 * path. Nothing in this header is needed to *use* it as a Level Zero device;
 * it only names the built-in kernels, the tuning variables and the checksum
 * that the built-in "checksum" kernel computes, so that programs can verify
 * data on the device.
 *
 * Valid C11 and C++.
 */
#ifndef FERRY_SIM_H
#define FERRY_SIM_H

#include <stddef.h>
#include <stdint.h>

/* zeModuleCreate with ZE_MODULE_FORMAT_NATIVE and this text as the input
 * module (pInputModule, inputSize = strlen) creates the built-in module. */
#define FERRY_SIM_BUILTIN_MODULE "ferry-sim-builtins-v1"

/* Kernels of the built-in module. Arguments are set with
 * zeKernelSetArgumentValue in the order listed; pointer arguments are passed
 * as the address of a pointer (as for any Level Zero kernel).
 *
 *   busy:     arg0 uint64_t microseconds  -- occupies the engine that long
 *   checksum: arg0 const void *src, arg1 uint64_t bytes, arg2 uint64_t *dst
 *             -- writes ferry_sim_checksum(src, bytes) to *dst
 *   fill:     arg0 void *dst, arg1 uint64_t bytes, arg2 uint32_t byte value
 */
#define FERRY_SIM_KERNEL_BUSY "busy"
#define FERRY_SIM_KERNEL_CHECKSUM "checksum"
#define FERRY_SIM_KERNEL_FILL "fill"

/* Environment read once, at the driver's first zeInit:
 *   FERRY_SIM_DEVICES        number of devices (default 1, at most 16)
 *   FERRY_SIM_FAST=1         every cost below is zero (fast tests)
 *   FERRY_SIM_LATENCY_US     per-command latency on the engine (default 5)
 *   FERRY_SIM_BANDWIDTH_GBPS copy bandwidth in GB/s, 0 = unlimited (default 12)
 *   FERRY_SIM_PAGEABLE_US    extra cost per append whose source is neither
 *                            host USM nor imported (default 20), paid by the
 *                            appending thread like a user-pointer import
 *   FERRY_SIM_DEVICE_MEMORY  bytes of device memory per device (default half of the host's
 *                            available memory when the driver starts, at most 16 GiB)
 *   FERRY_SIM_FAIL_COPY=N    the Nth copy executed by this process fails
 *   FERRY_SIM_FAIL_MODE      "once" (default: only that copy fails) or "lost"
 *                            (the device is lost from then on)
 */

/* Extension functions, reached with zeDriverGetExtensionFunctionAddress.
 * The Intel pair, same signature as the compute runtime's:
 *   ze_result_t zexDriverImportExternalPointer(ze_driver_handle_t, void *, size_t);
 *   ze_result_t zexDriverReleaseImportedPointer(ze_driver_handle_t, void *);
 * The simulator's own, to inject a fault at run time (0 disarms):
 *   ze_result_t zexFerrySimFailCopy(ze_driver_handle_t, uint64_t nth, int lost);
 *   (nth counts copies executed from now on, 1 = the next one)
 * and to count what the cost model charged, for tests that must not time it:
 *   ze_result_t zexFerrySimPageableAppends(ze_driver_handle_t, uint64_t *count);
 *   (*count: appends of this process that paid FERRY_SIM_PAGEABLE_US) */
#define FERRY_SIM_EXT_FAIL_COPY "zexFerrySimFailCopy"
#define FERRY_SIM_EXT_PAGEABLE_APPENDS "zexFerrySimPageableAppends"

/* 64-bit FNV-1a, the checksum of the built-in "checksum" kernel. */
static inline uint64_t ferry_sim_checksum(const void *data, size_t bytes)
{
    const unsigned char *p = (const unsigned char *)data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < bytes; ++i) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

#endif /* FERRY_SIM_H */
