// SPDX-License-Identifier: MIT
// ferry-run's Level Zero driver: the real driver's tables as it keeps them
// (ze_driver.cpp, the getters the loader calls) and the entries it puts in
// their place (ze_wrap.cpp).
#pragma once

#include <level_zero/ze_ddi.h>

#include <cstdint>

namespace ferry::run {

using ImportFn = ze_result_t (*)(ze_driver_handle_t, void*, size_t);
using ReleaseFn = ze_result_t (*)(ze_driver_handle_t, void*);
struct WriteDesc {
  uint32_t scope;  // ZEX_MEM_ACTION_SCOPE_FLAG_HOST = 1 << 2 (as ferry/level_zero.h)
};
using WriteFn = ze_result_t (*)(ze_command_list_handle_t, WriteDesc*, void*, uint64_t);

// The real driver: the entries of its tables we call or replace.
struct Real {
  ze_driver_dditable_t driver{};
  ze_context_dditable_t context{};
  ze_command_list_dditable_t list{};
  ze_mem_dditable_t mem{};
  ze_command_queue_dditable_t queue{};
  bool have_driver = false, have_context = false, have_list = false, have_mem = false, have_queue = false;
};
// The real driver's entries, kept by the getters before they put ours in.
Real& real();


// The entries of ours (ze_wrap.cpp).
ze_result_t driver_get(uint32_t* count, ze_driver_handle_t* drivers);
ze_result_t driver_extension(ze_driver_handle_t d, const char* name, void** f);
ze_result_t context_create(ze_driver_handle_t d, const ze_context_desc_t* desc, ze_context_handle_t* c);
ze_result_t context_create_ex(ze_driver_handle_t d, const ze_context_desc_t* desc, uint32_t n,
                              ze_device_handle_t* devices, ze_context_handle_t* c);
ze_result_t context_destroy(ze_context_handle_t c);
ze_result_t list_create(ze_context_handle_t c, ze_device_handle_t dev, const ze_command_list_desc_t* desc,
                        ze_command_list_handle_t* l);
ze_result_t list_create_immediate(ze_context_handle_t c, ze_device_handle_t dev, const ze_command_queue_desc_t* desc,
                                  ze_command_list_handle_t* l);
ze_result_t list_destroy(ze_command_list_handle_t l);
ze_result_t list_close(ze_command_list_handle_t l);
ze_result_t list_reset(ze_command_list_handle_t l);
ze_result_t queue_execute(ze_command_queue_handle_t q, uint32_t n, ze_command_list_handle_t* lists, ze_fence_handle_t f);
ze_result_t append_copy(ze_command_list_handle_t list, void* dst, const void* src, size_t size,
                        ze_event_handle_t signal, uint32_t waits, ze_event_handle_t* wait_events);
ze_result_t append_copy_region(ze_command_list_handle_t list, void* dst, const ze_copy_region_t* dr, uint32_t dst_pitch,
                               uint32_t dst_slice, const void* src, const ze_copy_region_t* sr, uint32_t src_pitch,
                               uint32_t src_slice, ze_event_handle_t signal, uint32_t waits,
                               ze_event_handle_t* wait_events);

}  // namespace ferry::run
