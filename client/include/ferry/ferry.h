/* SPDX-License-Identifier: MIT */
/* libferry: non-blocking, safe host-to-device uploads through ferryd.
 *
 * A process connects to the daemon of one device, allocates device buffers
 * through it, and uploads from any memory it owns. ferry_upload() returns as
 * soon as the bytes sit in a staging slot: the caller may then overwrite or
 * free its source, and the call never waits for work queued on the device.
 *
 * Conventions: every function returns 0 or a negative errno (ferry_strerror()
 * describes it). Any number of threads may share one ferry_client, except
 * that ferry_disconnect() must not race with other calls on the same client.
 * Timeouts are in nanoseconds; a negative timeout waits without limit, 0
 * only looks.
 *
 * A client belongs to the process that connected it. After fork(), every
 * call on an inherited client in the child returns -ECHILD (ferry_last_error
 * names both processes) and touches nothing shared: the child does not even
 * map the parent's staging segment, sends nothing on the parent's socket,
 * and ferry_disconnect there only closes the child's copy of the socket
 * descriptor (the rest of the inherited client's memory stays allocated in
 * the child: the threads it would join exist only in the parent). A child
 * connects a client of its own; the parent's goes on as before.
 *
 * A stalled daemon (stopped, say) never hangs a call that waits on it
 * internally: connecting, every request that needs an answer, an upload
 * waiting for a slot and a download end with -ETIMEDOUT once the daemon made
 * no progress for $FERRY_TIMEOUT_MS milliseconds (default 30000). After a
 * slot wait or a download timed out, the connection is done for: later calls
 * return -ETIMEDOUT; disconnect and connect again. ferry_wait and ferry_flush
 * wait as long as their own timeout says.
 *
 * Valid C11 and C++.
 */
#ifndef FERRY_FERRY_H
#define FERRY_FERRY_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_client ferry_client;
/* A device buffer, named per client; id 0 is never valid. A struct, so that
 * it and a ticket (or any integer) do not convert into each other: swapped
 * arguments do not compile. It is passed as one 64-bit integer would be
 * (x86-64, AArch64), so the ABI of the calls taking it is unchanged. */
typedef struct ferry_buffer {
  uint64_t id;
} ferry_buffer;
typedef uint64_t ferry_ticket; /* an upload; numbered per client from 1, completed in order */

/* Connects to ferryd and receives this client's staging segment.
 * socket_path: NULL means $FERRY_SOCKET, else /run/ferry/ferryd-0.sock.
 * Returns 0 and sets *out, or (-EFAULT for a NULL out):
 *   -ENXIO         no socket at that path (the daemon is not running)
 *   -EACCES        not allowed to connect (socket mode and group: the
 *                  socket's group is the one to join)
 *   -ECONNREFUSED  a stale socket: no daemon accepts on it
 *   -EUSERS        the daemon serves the most clients or connections it
 *                  may, of all users or of this user (ferry_last_error says
 *                  which, and the flag that sets it)
 *   -EPROTONOSUPPORT  the daemon speaks another protocol version (the text
 *                  names both); -EPROTO: what it sent is no ferry protocol
 * Blocks until the daemon answers (at most a few seconds). */
int ferry_connect(const char *socket_path, ferry_client **out);

/* ferry_connect, with the name ferryctl shows for this client (its COMMAND
 * column; its first 15 bytes are kept, characters other than printable
 * ASCII shown as ?). name NULL or "": $FERRY_CLIENT_NAME,
 * else the program's name, as ferry_connect does. For a program whose
 * connections play different roles (ferry.torch's trainer and its loader's
 * workers); setting $FERRY_CLIENT_NAME instead is not safe while other
 * threads may read the environment. Returns as ferry_connect. */
int ferry_connect_named(const char *socket_path, const char *name, ferry_client **out);

/* Closes the connection and frees the client. Buffers the client still owns
 * are freed by the daemon once uploads in flight to them end. Uploads not yet
 * completed still complete on the device, but nobody is told. c may be NULL. */
void ferry_disconnect(ferry_client *c);

/* 0 while the daemon serves c; once the connection ended, why: -ESHUTDOWN
 * (the daemon is stopping or stopped, as for a restart or an upgrade: while
 * it drains, c's transfers still complete), -ECONNRESET (it went
 * away), -ECONNABORTED (an administrator disconnected c: ferryctl
 * disconnect), -EPROTO (it could not read c: a broken ring), or another
 * error it ended c with. Calls that need the daemon return that
 * error from then on: a program that wants ferry again connects a new client
 * (ferry-run's do so on their own, once the new daemon listens). Does not
 * block: it reads what the connection's receiver saw. */
int ferry_connection_error(ferry_client *c);

/* Allocates `bytes` of device memory owned by this client.
 * -EINVAL for 0 bytes, -ENOMEM when the device has no room, -EDQUOT past a
 * bound on what this user's clients hold together (device memory,
 * allocations; ferry_last_error names it and its flag). Blocks for one round
 * trip to the daemon. */
int ferry_buffer_alloc(ferry_client *c, uint64_t bytes, ferry_buffer *out);

/* Frees a buffer of this client. Uploads in flight to it still finish first.
 * For an import (ferry_buffer_import) this returns once the daemon no longer
 * maps the allocation (after the copies in flight into it): the caller may
 * free its own memory then, and not before. -ENOENT when this client owns no
 * such buffer. One round trip (an import's: plus its copies in flight). */
int ferry_buffer_free(ferry_client *c, ferry_buffer buf);

/* Size of a buffer this client allocated, in *bytes. -ENOENT otherwise.
 * Does not block. */
int ferry_buffer_size(ferry_client *c, ferry_buffer buf, uint64_t *bytes);

/* Copies `bytes` from `src` to buffer `dst` at `dst_offset`. Returns once
 * `src` may be reused: every byte is staged. Large uploads are cut into
 * slot-sized pieces that overlap with the device's copies; when all of this
 * client's slots are in flight the call waits for the oldest (the device's
 * copy, never queued kernels). *out (may be NULL) receives the ticket that
 * completes when the whole upload is on the device.
 * -EINVAL for 0 bytes, -EFAULT for a NULL src, -ERANGE for a range past
 * the buffer's end (64-bit wrap included); -ENOENT for a buffer this client
 * does not own.
 * A range error reported later, by the daemon, fails the ticket instead. */
int ferry_upload(ferry_client *c, ferry_buffer dst, uint64_t dst_offset, const void *src, uint64_t bytes,
                 ferry_ticket *out);

/* One range of an upload's source (ferry_upload_gather). */
typedef struct ferry_iovec {
  const void *base;
  uint64_t bytes;
} ferry_iovec;

/* What an upload asks besides its bytes (ferry_upload_gather). Zero it, set
 * size to sizeof(ferry_upload_opts) and the fields you need: a library
 * built against an older header reads only the fields it knows. */
typedef struct ferry_upload_opts {
  uint32_t size;          /* sizeof(ferry_upload_opts) */
  uint32_t flags;         /* 0 */
  uint64_t after;         /* > 0: the copy starts once *app_value >= after (ferry_upload_after) */
  uint64_t after_release; /* > 0: the copy starts once dst's fence *released >= this (ferry_buffer_fence) */
  uint64_t publish;       /* > 0: after the last byte, the device writes this into dst's fence *ready */
} ferry_upload_opts;

/* ferry_upload of `count` source ranges, copied back to back into dst from
 * dst_offset: a batch collated from many samples goes into the staging
 * memory straight from where each sample lies, with no intermediate copy.
 * The same contract as ferry_upload (returns once every range may be
 * reused; one ticket for the whole upload). opts may be NULL.
 * With after_release or publish, dst must be an allocation (of this client,
 * or of the client that granted it) and so have a fence: the copy is held by
 * ferryd, on the host, until the fence's `released` word reaches
 * after_release, and the device writes `publish` into its `ready` word right
 * after the last byte. A held copy holds this client's later transfers
 * behind it, nobody else's. A failed upload still writes `publish` (so a
 * queue that waits on it goes on), after setting the fence's `failed` word.
 * -EFAULT: src NULL, or a NULL range of non-zero length; -EINVAL: no
 * ranges or 0 bytes in all, opts->size too small or unknown flags;
 * -EOVERFLOW: ranges totalling more than 2^64 bytes; -ERANGE: past dst's
 * end; -ENOENT: not this client's buffer; -ENOTSUP: fences asked
 * of a daemon without them; a dst without a fence fails the ticket with
 * -ENOTSUP. */
int ferry_upload_gather(ferry_client *c, ferry_buffer dst, uint64_t dst_offset, const ferry_iovec *src,
                        size_t count, const ferry_upload_opts *opts, ferry_ticket *out);

/* ---------------------------------------------------------------- fences
 * Ordering across processes on the device. Each allocation has a fence:
 * three words in its owner's staging segment, which the owner registers
 * with its own context like the timeline (ferry/cuda.h). A producer that
 * opened the buffer through a grant uploads with `publish` = v; the
 * device writes v into `ready` right after the copy, so the owner's queue
 * waits for `ready` >= v (cuStreamWaitValue64,
 * zexCommandListAppendWaitOnMemory64) with no host round trip, even though
 * the ticket means nothing in the owner's process. Once the owner's queue is done reading, it writes
 * v into `released` (cuStreamWriteValue64), and the producer's next upload,
 * made with after_release = v, starts only then (write after read). A
 * release that never comes stalls only the producers of that buffer.
 * Values should only grow: use one increasing counter per owner. A new
 * allocation's fence starts at 0 (a write its queue had still queued for a
 * freed buffer may land in it later: finish with a buffer's fence first). */
typedef struct ferry_fence {
  volatile uint64_t *ready;    /* written by the device (or ferryd) after a publishing upload */
  volatile uint64_t *released; /* written by the owner, or its queue */
  volatile uint64_t *failed;   /* the value of the last publishing upload that failed; 0: none */
} ferry_fence;

/* Where the fence of a buffer this client allocated lies (in its segment).
 * -ENOENT: not an allocation of this client (a buffer opened through a
 * grant included: its fence is its owner's); -ENOTSUP: one without a fence
 * (all 1024 fences were in use when it was made) or a daemon without fences;
 * -EFAULT: a NULL out. Does not block. */
int ferry_buffer_fence(ferry_client *c, ferry_buffer buf, ferry_fence *out);

/* Waits on the host until buf's fence *ready >= value (> 0); timeout as
 * ferry_wait. 0, -EIO when that upload (or a later one into buf) failed,
 * -ETIMEDOUT, or ferry_buffer_fence's errors. */
int ferry_fence_wait(ferry_client *c, ferry_buffer buf, uint64_t value, int64_t timeout_ns);

/* Pinned staging memory reserved for one upload (ferry_upload_reserve). */
typedef struct ferry_reservation {
  void *data;        /* write the upload's bytes here, then commit */
  uint64_t bytes;
  uint64_t ticket;   /* libferry's: 0 once committed */
  uint64_t staging;  /* libferry's */
} ferry_reservation;

/* Reserves `bytes` (1 to ferry_info.slot_bytes) of this client's pinned
 * staging memory for one upload written in place: r->data points at it. A
 * producer that builds its data there saves the host copy ferry_upload makes
 * from memory of its own. Waits, as ferry_upload does, while those bytes are
 * still in flight. Until the commit this client's later transfers wait
 * behind the reservation: commit each one soon, and from any thread.
 * -EINVAL for 0 bytes, -EMSGSIZE for more than a slot, -EFAULT for a NULL
 * r. */
int ferry_upload_reserve(ferry_client *c, uint64_t bytes, ferry_reservation *r);

/* Uploads a reservation's bytes to `dst` at `dst_offset`; *out (may be NULL)
 * receives the ticket, which completes when they are on the device. The
 * reservation is used up even when this fails: a range that is not this
 * client's (-EINVAL, -ENOENT, as ferry_upload) also fails the ticket.
 * -EINVAL for a reservation already committed. */
int ferry_upload_commit(ferry_client *c, ferry_reservation *r, ferry_buffer dst, uint64_t dst_offset,
                        ferry_ticket *out);

/* Gives a reservation up: nothing is written anywhere, and its ticket
 * completes with no error, so the client's later transfers go on.
 * -EINVAL for a reservation already committed or cancelled. */
int ferry_upload_cancel(ferry_client *c, ferry_reservation *r);

/* Waits until ticket t (of any kind, direct uploads' too) is done. 0: its
 * bytes are on the device. Otherwise
 * -ETIMEDOUT, the ticket's own error (e.g. -EIO from the device), or
 * -ECONNRESET / -ESHUTDOWN when the daemon went away. A ticket's error is
 * reported by the first wait or flush that covers it. */
int ferry_wait(ferry_client *c, ferry_ticket t, int64_t timeout_ns);

/* Waits until every ticket issued so far is done. Returns 0, -ETIMEDOUT, or
 * the error of the oldest failed ticket not yet reported. */
int ferry_flush(ferry_client *c, int64_t timeout_ns);

/* Copies `bytes` of buffer `src` at `src_offset` into `dst`; blocks until the
 * bytes are in `dst`. Ordered after this client's earlier uploads. Same
 * errors as ferry_upload, plus the device's. */
int ferry_download(ferry_client *c, ferry_buffer src, uint64_t src_offset, void *dst, uint64_t bytes);

/* ---------------------------------------------------------------- sharing
 * Producers fill device buffers that a consumer computes on. The owner of a
 * buffer grants rights on it with an unguessable token; whoever presents the
 * token opens the buffer under a name of its own and may use it within those
 * rights, until the owner revokes the grant or frees the buffer. */

#define FERRY_RIGHT_UPLOAD 1u
#define FERRY_RIGHT_DOWNLOAD 2u

typedef struct ferry_token {
  uint8_t bytes[32]; /* 256 random bits: pass it to the processes you trust */
} ferry_token;

/* Grants `rights` (FERRY_RIGHT_*) on a buffer this client allocated or
 * imported. -ENOENT: not this client's own. One round trip. */
int ferry_buffer_grant(ferry_client *c, ferry_buffer buf, uint32_t rights, ferry_token *out);

/* Ends the grant `token` (or, with token NULL, every grant of buf). Clients
 * that opened it are refused from their next transfer on (-EACCES); a
 * transfer already accepted completes. Once the owner frees the buffer (or
 * disconnects), their transfers fail with -ENOENT instead. One round trip. */
int ferry_buffer_revoke(ferry_client *c, ferry_buffer buf, const ferry_token *token);

/* Opens a buffer granted to the holder of `token`: *out names it for this
 * client, *bytes (may be NULL) is its size. -EACCES for an unknown, forged or
 * revoked token. One round trip. */
int ferry_buffer_open(ferry_client *c, const ferry_token *token, ferry_buffer *out, uint64_t *bytes);

#define FERRY_IPC_LEVEL_ZERO 1u /* data is a ze_ipc_mem_handle_t / ze_ipc_event_pool_handle_t */
#define FERRY_IPC_CUDA 2u       /* data is a CUipcMemHandle */

typedef struct ferry_ipc_handle {
  uint32_t kind;  /* FERRY_IPC_* */
  int32_t fd;     /* Level Zero: the handle's file descriptor (in data's first bytes), else -1 */
  uint64_t bytes; /* size of the allocation */
  uint8_t data[64];
} ferry_ipc_handle;

/* An IPC handle of a buffer this client allocated, to open in the client's
 * own context: zeMemOpenIpcHandle(ctx, dev, *(ze_ipc_mem_handle_t *)out->data,
 * 0, &ptr), or cuIpcOpenMemHandle. The exception, not the rule: ferryd
 * cannot see when another process closes the mapping, so the buffer's size
 * stays charged to this user's export allowance (--user-memory) until ferryd
 * restarts, freed or not. A process with a context of its own imports an
 * allocation of its own instead (ferry_buffer_import), charged only while
 * ferryd maps it. Level Zero: out->fd is this process's own
 * descriptor, already written into data; close it after opening. The buffer
 * must stay allocated while the consumer uses the mapping. One round trip. */
int ferry_buffer_export(ferry_client *c, ferry_buffer buf, ferry_ipc_handle *out);

/* The reverse: hands the daemon an IPC handle of an allocation this process
 * owns in its own context (zeMemGetIpcHandle: set kind, data, bytes, and fd to
 * the descriptor in data's first bytes; CUDA: cuIpcGetMemHandle of the
 * allocation's base), so that uploads through ferry can target it. *out
 * names it; it has a fence (ferry_buffer_fence) and may be granted, as an
 * allocation. The daemon maps it until ferry_buffer_free returns (or this
 * client ends): only then may the process free the allocation. It counts
 * against this user's --user-memory (the whole allocation) while the daemon
 * maps it, and nothing after: the way for a process with a GPU context of
 * its own to receive uploads (ferry.torch's trainer does this), where an
 * export (above) is charged for the daemon's life. One round trip. */
int ferry_buffer_import(ferry_client *c, const ferry_ipc_handle *h, ferry_buffer *out);

/* Registers an IPC event pool of this process's context (created with
 * ZE_EVENT_POOL_FLAG_IPC, `count` events; h from zeEventPoolGetIpcHandle with
 * fd set), so that uploads can signal its events on the device (Level Zero).
 * *pool names it. One round trip. */
int ferry_event_pool_register(ferry_client *c, const ferry_ipc_handle *h, uint32_t count, uint64_t *pool);

/* ferry_upload, after which the device signals event `event` of `pool`: a
 * command list that waits on that event runs only once every byte of this
 * upload is in place, without any host thread waiting. Reset the event
 * before reusing it. */
int ferry_upload_signal(ferry_client *c, ferry_buffer dst, uint64_t dst_offset, const void *src, uint64_t bytes,
                        uint64_t pool, uint32_t event, ferry_ticket *out);

/* ---------------------------------------------------------------- queue order
 * An upload that sits between kernels of the application's own queue:
 * kernels that read the old bytes, then the copy, then kernels that read the
 * new ones. Both directions go through words of the client's segment:
 *  - read after upload: the device writes the client's completed ticket into
 *    *completed right after the copies (ferry/level_zero.h and ferry/cuda.h
 *    make the application's queue wait for it, with no host thread);
 *  - write after read: the application's queue (or the process) writes a
 *    value of its own timeline into *app_value, and ferry_upload_after's copy
 *    starts only once that value is reached. The hold is kept by ferryd on
 *    the host, so a value that never comes stalls only this client.
 * A ticket the daemon refused passes *device_completed too (ordered after
 * the copies before it); its error reaches ferry_wait/ferry_flush as usual.
 *
 * ferry_timeline and ferry_info are versioned by size: zero the struct (or
 * set size to sizeof it) before the call; the library fills what the
 * caller's version holds and sets size to the bytes it wrote. Later
 * versions only append fields. */
typedef struct ferry_timeline {
  uint32_t size;                        /* sizeof(ferry_timeline), or 0 for this version */
  int32_t device_written;               /* 1: the device writes *device_completed after the copies;
                                           0: ferryd writes it when they retire (no device support) */
  void *segment;                        /* the staging segment, mapped in this process */
  uint64_t segment_bytes;               /* import or register all of it with your context */
  volatile uint64_t *device_completed;  /* every ticket <= it is on the device (ferry_completed
                                           is the host's view: done and reported) */
  volatile uint64_t *app_value;         /* the application's timeline (ferry_upload_after) */
  volatile uint64_t *direct_completed;  /* direct uploads: every one numbered <= it is on the
                                           device; your queue writes it (ferry_upload_direct) */
} ferry_timeline;

/* Where this client's timeline words are. Does not block. */
int ferry_get_timeline(ferry_client *c, ferry_timeline *out);

/* As ferry_upload, but the device copy starts only once *app_value >= after
 * (after > 0). Returns once the bytes are staged, as ferry_upload does; this
 * client's later uploads and downloads wait behind the held one (its slots
 * stay held until the value comes, or the client disconnects). Another
 * client is never held. */
int ferry_upload_after(ferry_client *c, ferry_buffer dst, uint64_t dst_offset, const void *src, uint64_t bytes,
                       uint64_t after, ferry_ticket *out);

/* Raises *app_value to `value` from the host (never lowers it): for work the
 * application orders on the host rather than in a queue. Does not block. */
int ferry_signal(ferry_client *c, uint64_t value);

/* ---------------------------------------------------------------- direct uploads
 * For a process with a GPU context of its own: the source is staged into
 * this client's pinned staging memory exactly as ferry_upload stages it
 * (same pieces, same staging threads, the source reusable when the call
 * returns), but the copy from there into the caller's device memory is
 * appended to the caller's own queue (a CUDA stream, a Level Zero command
 * list), followed by the device's write of the client's direct timeline
 * word. The queue orders the copy with the caller's kernels: no wait, no
 * hold, no ferryd and no other process between them. ferry/cuda.h
 * (ferry_cu_upload) and ferry/level_zero.h (ferry_ze_upload) wrap this call
 * for their queues; the call itself knows no GPU API.
 *
 * Staging bytes are reused only once the queue wrote the number of the copy
 * that read them: a queue held back for seconds holds this client's staging
 * (its later uploads of either kind wait for room, and end with -ETIMEDOUT
 * after $FERRY_TIMEOUT_MS without progress, as ferry_upload does); nobody
 * else's. The segment must be registered with the queue's context first
 * (ferry_cu_register, ferry_ze_import): staging is then pinned memory the
 * queue copies from at full speed.
 *
 * Direct tickets are numbered apart from the others and have
 * FERRY_DIRECT_TICKET set; they complete in their own order. ferry_wait and
 * ferry_flush take them as any ticket; ferry_completed counts the others
 * only. A direct upload's ticket fails only when the queue refused its copy
 * (the call returned that error too); a fault while the queue runs shows in
 * the queue's own API, as for any of its copies.
 *
 * One queue at a time: the numbers are written in the queue's order, so a
 * call on another queue (ops->queue and ops->queue_context) first waits on
 * the host until every direct upload of the previous queue is done
 * (-ETIMEDOUT after $FERRY_TIMEOUT_MS). Give each queue its own ferry_client
 * for uploads that never wait; do not destroy a queue with direct uploads in
 * flight (a new one may get its handle). A queue that replays what was
 * appended (a CUDA graph, a Level Zero command list executed again) would
 * copy recycled staging bytes: append to immediate command lists and
 * streams that are not being captured. A queue that runs only after the
 * call returned (a regular command list not yet executed, a stream waiting
 * for the host) must be given no more than the staging holds, or the call
 * waits for it and times out, and the client is done for. Unregister the
 * segment and disconnect only once the queue finished its copies. */
#define FERRY_DIRECT_TICKET (UINT64_C(1) << 63)
/* ferry_direct_ops::flags: never wait for staging room. Where the upload
 * cannot be staged at once (the staging holds copies the queue has not run
 * yet, and no staging area can be had: ferry_set_staging_hooks), the call
 * returns -EAGAIN with nothing staged or appended, and the caller copies
 * some other way (ferry-run then leaves the copy to the driver). */
#define FERRY_DIRECT_NO_WAIT (1u << 0)
/* ferry_direct_ops::flags: call ops->copy and ops->write from the calling
 * thread only (for a queue whose name means another queue on another
 * thread, such as CUDA's per-thread default stream); staging then uses no
 * thread but the caller's. */
#define FERRY_DIRECT_CALLER_THREAD (1u << 1)
/* ferry_direct_ops::flags: take no new staging area for this upload (an
 * area already made and free may still serve): for a copy that would not
 * pay for one, such as a synchronous one. */
#define FERRY_DIRECT_NO_GROW (1u << 2)
/* ferry_direct_ops::flags: where no staging area free now holds the upload,
 * take none now: have one made on a thread of libferry's (as
 * ferry_staging_grow) for the uploads after it, and go on as without areas
 * (wait for room, or -EAGAIN with FERRY_DIRECT_NO_WAIT). For a caller with
 * a way of its own that is faster than making an area (registering 1 GiB
 * takes longer than the driver's pageable copy of it). NO_GROW wins. */
#define FERRY_DIRECT_GROW_LATER (1u << 3)

typedef struct ferry_direct_ops {
  uint32_t size;   /* sizeof(ferry_direct_ops) */
  uint32_t flags;  /* 0, or FERRY_DIRECT_NO_WAIT | _CALLER_THREAD | _NO_GROW | _GROW_LATER */
  void *ctx;       /* passed to both functions */
  uint64_t queue;  /* names the queue (e.g. the stream's handle): see "One queue at a time" */
  uint64_t queue_context; /* and its context (a handle is unique only within one): both name the queue */
  /* Appends to the queue a copy of `bytes` from `staging` (pinned memory of
   * the segment) to the destination's byte `dst_offset`. 0 or a negative errno. */
  int (*copy)(void *ctx, uint64_t dst_offset, const void *staging, uint64_t bytes);
  /* Appends the device's write of `value` into *word (a word of the
   * segment), after every command appended before it. 0 or a negative errno. */
  int (*write)(void *ctx, volatile uint64_t *word, uint64_t value);
} ferry_direct_ops;

/* Stages `bytes` from `src` and has ops append, in order, one copy per
 * piece (dst_offset 0 up to bytes) and after each the write of its number.
 * The functions are called one at a time, in order, from the calling
 * thread or from libferry's staging threads (a large upload), never after
 * the call returned. Returns once src may be reused and every copy is
 * appended; *out (may be NULL) receives the ticket, FERRY_DIRECT_TICKET |
 * the number of the last piece, done once the queue wrote that number.
 * Never waits for the queue, except for staging room (see above).
 * -EINVAL: 0 bytes, ops->size too small or unknown flags; -EFAULT: a NULL
 * src, ops or function; -EAGAIN: FERRY_DIRECT_NO_WAIT and no room now. A
 * copy the queue refused: that error, and the ticket fails with it (*out is
 * set). A write the queue refused: that error, and this client is done for
 * (-EIO from then on: it can no longer tell when its staging is free);
 * disconnect and connect again. */
int ferry_upload_direct(ferry_client *c, const void *src, uint64_t bytes, const ferry_direct_ops *ops,
                        ferry_ticket *out);

/* ---------------------------------------------------------------- staging that grows
 * A direct upload that would wait for staging room (larger than the
 * client's staging, or behind copies its queue has not run yet) can take a
 * staging area instead: pinned memory of its own, which ferryd grants on
 * demand (a memfd, counted against the user's --user-staging) and this
 * client maps. The upload is staged there whole and the call returns; the
 * area is reused once the queue copied from it, and given back after about
 * ten seconds unused (at a later call, or at ferry_disconnect). Past the
 * user's bound the upload waits for room as before (or, with
 * FERRY_DIRECT_NO_WAIT, returns -EAGAIN).
 *
 * The caller's context must be able to copy from an area at full speed, as
 * from the segment (ferry_cu_register, ferry_ze_import): the hooks do that.
 * attach() is called on the thread of the upload that first uses an area,
 * before any copy from it is appended (for an area made ahead, on a thread
 * of libferry's, while the program's threads go on: ferry_staging_grow; the
 * hooks must take no lock the program holds around ferry calls, and
 * ferry_set_staging_hooks waits for an attach under way); detach() once no queue copies from it
 * any more, before it is unmapped, on the thread of a later ferry call (or
 * ferry_disconnect). 0 or a negative errno from attach: that area is not
 * used (and given back). Without hooks (the default) no area is taken and
 * direct uploads wait for room as they always did; ferry-run(1) sets them
 * (for CUDA: cuMemHostRegister with CU_MEMHOSTREGISTER_PORTABLE, with the
 * context pushed in detach's cuMemHostUnregister; for Level Zero:
 * zexDriverImportExternalPointer and its release). */
typedef struct ferry_staging_hooks {
  uint32_t size;  /* sizeof(ferry_staging_hooks) */
  uint32_t flags; /* 0 */
  void *ctx;      /* passed to both functions */
  int (*attach)(void *ctx, void *area, uint64_t bytes);
  void (*detach)(void *ctx, void *area, uint64_t bytes);
} ferry_staging_hooks;

/* Sets (or, with NULL, clears: no new areas) this client's hooks; the
 * struct is copied. -EINVAL for a size too small or unknown flags, -EFAULT
 * for a NULL function. Does not block. */
int ferry_set_staging_hooks(ferry_client *c, const ferry_staging_hooks *hooks);

/* Has a staging area of at least `bytes` made ahead, for the direct uploads
 * to come: ferryd is asked and the area mapped and attached (the hooks'
 * attach) on a thread of libferry's, and the call returns at once. The area
 * is then kept and given back as any other. Nothing is made when a free
 * area already holds `bytes` or one being made does. 0 (asked for, or not
 * needed), -EINVAL for 0 bytes or more than 2^48, -ENOTSUP without staging
 * hooks, -EAGAIN when the client holds as many areas as it may and none is
 * free, or ferryd left the last ask unanswered (asked again after a few
 * seconds), and the connection's error once ferryd is gone
 * (ferry_connection_error). Whether ferryd granted it shows only in the
 * uploads that use it. That thread also gives back, about every ten
 * seconds, areas left unused for as long, so a client that stopped
 * uploading keeps none. */
int ferry_staging_grow(ferry_client *c, uint64_t bytes);

/* ---------------------------------------------------------------- programs that stand in
 * For a program that stands in for another's GPU calls (ferry-run's
 * interposers, which make one client per queue of a process): what the
 * process staged through ferry and what it left to the driver, by reason,
 * shown in this client's row of `ferryctl status` and in the metrics. The
 * lead client of a process carries the process's counts; a lane (another
 * queue's client) only its role. */
enum {
  FERRY_PASS_SMALL = 0,   /* below the size from which staging pays */
  FERRY_PASS_PINNED,      /* the source is pinned or the driver's host memory already */
  FERRY_PASS_NOT_UPLOAD,  /* not host to device */
  FERRY_PASS_CAPTURED,    /* a stream being captured into a graph */
  FERRY_PASS_REPLAYABLE,  /* a regular Level Zero command list ferry-run leaves alone (--list-bytes 0) */
  FERRY_PASS_NO_DAEMON,   /* ferryd absent, stopped or refusing */
  FERRY_PASS_NO_ROOM,     /* no staging room now and no more granted */
  FERRY_PASS_ERROR,       /* a ferry call failed */
  FERRY_PASS_UNSUPPORTED, /* a shape or memory ferry does not stage */
  FERRY_PASS_BUSY,        /* every client of the process busy with another queue */
  FERRY_PASS_REASONS
};
#define FERRY_RUN_LEAD 1u
#define FERRY_RUN_LANE 2u
typedef struct ferry_run_counts {
  uint32_t size; /* sizeof(ferry_run_counts) */
  uint32_t role; /* FERRY_RUN_LEAD or FERRY_RUN_LANE */
  uint64_t staged, staged_bytes;
  uint64_t passed[FERRY_PASS_REASONS];
  uint64_t passed_bytes;
} ferry_run_counts;

/* Publishes counts for ferryctl (words of this client's segment, which
 * ferryd only shows). -EINVAL for a size too small or an unknown role.
 * Does not block. */
int ferry_publish_run(ferry_client *c, const ferry_run_counts *counts);

/* The name `ferryctl status`, the metrics and ferry-run's report give a
 * FERRY_PASS_* reason ("no_room"), or NULL for a number that is none. */
const char *ferry_pass_reason_name(int why);

/* Geometry this client was given (versioned by size, as ferry_timeline).
 * Does not block. */
typedef struct ferry_info {
  uint32_t size;       /* sizeof(ferry_info), or 0 for this version */
  uint32_t slot_count;
  uint64_t client_id;
  uint64_t slot_bytes;
  char device[64];  /* device name */
  char backend[16]; /* "level-zero", "cuda" */
  int32_t daemon_pid; /* the daemon's process as this process sees it (0: in a pid namespace out of sight) */
  uint32_t reserved;
} ferry_info;
int ferry_get_info(ferry_client *c, ferry_info *out);

/* The highest ticket such that it and every earlier one are done. Does not
 * block: it reads a counter the daemon keeps in shared memory. */
ferry_ticket ferry_completed(ferry_client *c);

/* The socket this client connected to, as resolved from socket_path,
 * $FERRY_SOCKET or the default; with c NULL, the path ferry_connect(NULL)
 * would use now. Valid while the client lives (NULL: until the thread's next
 * call). */
const char *ferry_socket_path(const ferry_client *c);

/* A description of a value returned by any ferry function (static storage). */
const char *ferry_strerror(int err);

/* What the calling thread's last call on a client (or ferry_connect) said
 * beyond its errno, in words: for a failed ferry_connect the socket path and
 * what to do ("no daemon socket at /run/ferry/ferryd-0.sock: is ferryd
 * running?"); for a misuse the call and the argument ("ferry_upload: offset
 * 990 + 11 bytes is past the end of buffer 3 (1000 bytes)"); for -ECHILD
 * which process owns the client; for a refusal by the daemon what it
 * refused and the bound or flag. "" when that call succeeded or its errno
 * says it all (ferry_strerror). Each such call starts by clearing it, so it
 * never describes an earlier call. Static per thread; valid until the
 * thread's next call. */
const char *ferry_last_error(void);

/* The library's version, e.g. "0.1.0"; compare with FERRY_VERSION_STRING. */
const char *ferry_version(void);

#ifdef __cplusplus
}
#endif

#endif /* FERRY_FERRY_H */
