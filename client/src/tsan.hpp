// SPDX-License-Identifier: MIT
// ThreadSanitizer annotations for the slot hand-off.
#pragma once

// A slot passes from one writer to the next through the daemon, another
// process: ThreadSanitizer cannot see that order, so we state it.
#if defined(__SANITIZE_THREAD__)
#define FERRY_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FERRY_TSAN 1
#endif
#endif
#ifdef FERRY_TSAN
#include <sanitizer/tsan_interface.h>
#define FERRY_SLOT_HANDED_ON(p) __tsan_release(p)
#define FERRY_SLOT_TAKEN(p) __tsan_acquire(p)
#else
#define FERRY_SLOT_HANDED_ON(p) (void)(p)
#define FERRY_SLOT_TAKEN(p) (void)(p)
#endif
