/*
 * rucx — extensions of the UCP API that UCX 1.13 does not have. They are exported by
 * rucx's libucp.so.0 only: a program that calls them runs on rucx, not on UCX.
 * Include after (or instead of) <ucp/api/ucp.h>.
 */
#ifndef RUCX_UCP_EXT_H_
#define RUCX_UCP_EXT_H_

#include <ucp/api/ucp.h>
#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------ */
/* put with remote signal                                                               */
/* ------------------------------------------------------------------------------------ */

/* What a put with remote signal does to its 64-bit signal word. */
typedef enum {
    RUCX_SIGNAL_OP_ADD = 0, /* add the value (wrapping) */
    RUCX_SIGNAL_OP_SET = 1  /* store the value */
} rucx_signal_op_t;

/*
 * Writes count elements of param's datatype (bytes when no datatype is given; only
 * contiguous datatypes) from buffer to remote_addr in rkey's memory, then applies op with
 * value to the 64-bit word at signal_addr in signal_rkey's memory. Both keys must be
 * unpacked on ep.
 *
 * The order is guaranteed at the target on every transport and access path: a process
 * that reads the signal word with an acquire load (or through ucp_worker_progress and a
 * volatile read on x86) and sees the signal's effect also sees all of the data.
 *
 * signal_addr must be 8-byte aligned and lie, with its 8 bytes, inside signal_rkey's
 * region; the data must lie inside rkey's. Otherwise the call fails with
 * UCS_ERR_INVALID_PARAM and nothing is written. An unknown op is UCS_ERR_INVALID_PARAM.
 *
 * Returns as the other _nbx calls: NULL when the operation completed in the call (the
 * data and the signal are both in place), an error pointer, or a request that completes
 * when both are in place (param's callback, user_data, request memory and
 * UCP_OP_ATTR_FLAG_NO_IMM_CMPL are honoured). buffer must stay unchanged until then.
 * ucp_ep_flush_nbx / ucp_worker_flush_nbx also wait for it.
 */
ucs_status_ptr_t rucx_put_signal_nbx(ucp_ep_h ep, const void *buffer, size_t count,
                                     uint64_t remote_addr, ucp_rkey_h rkey,
                                     uint64_t signal_addr, ucp_rkey_h signal_rkey,
                                     rucx_signal_op_t op, uint64_t value,
                                     const ucp_request_param_t *param);

/* ======================================================================================
 * completion queues
 *
 * A completion queue collects the completions of operations as entries, for runtimes that
 * pre-post many operations and poll one queue instead of writing callbacks. An operation
 * names a queue with a rucx_request_param_t whose op_attr_mask has RUCX_OP_ATTR_FIELD_CQ;
 * its completion is then exactly one entry in the queue, carrying the operation's
 * user_data (UCP_OP_ATTR_FIELD_USER_DATA; NULL without it), whether it completed inside
 * the starting call or later, failed, was canceled, or its endpoint failed. Such a call
 * returns NULL (UCS_OK: the entry will come) or an error pointer (the operation did not
 * start; no entry will come); it never returns a request.
 *
 * Any thread may poll a queue, also one that does not own the worker: polling takes no
 * worker lock and never blocks. A queue holds `capacity` entries in a lock-free ring and
 * never drops one: beyond that, entries go to an (allocating) overflow list, polled after
 * the ring.
 *
 * Works with: ucp_tag_send_nbx, ucp_tag_send_sync_nbx, ucp_tag_recv_nbx,
 * ucp_tag_msg_recv_nbx, ucp_am_send_nbx, ucp_am_recv_data_nbx, ucp_stream_send_nbx,
 * ucp_stream_recv_nbx, ucp_put_nbx, ucp_get_nbx, ucp_atomic_op_nbx (64-bit, with a reply
 * buffer), ucp_ep_flush_nbx, ucp_worker_flush_nbx. Other operations (ucp_ep_close_nbx,
 * 32-bit fetching atomics, atomics without a reply buffer) return UCS_ERR_UNSUPPORTED
 * when given a queue. RUCX_OP_ATTR_FIELD_CQ together with UCP_OP_ATTR_FIELD_REQUEST or
 * UCP_OP_ATTR_FIELD_CALLBACK is UCS_ERR_INVALID_PARAM.
 * ====================================================================================== */

typedef struct rucx_cq *rucx_cq_h;

/* op_attr_mask bit: the parameters are a rucx_request_param_t naming a queue. Bit 31:
 * UCX 1.13's ucp_op_attr_t uses bits 0-8 and 16-19. */
#define RUCX_OP_ATTR_FIELD_CQ (1u << 31)

/* Parameters of an operation that reports into a queue: UCX's, then the queue. */
typedef struct rucx_request_param {
    ucp_request_param_t super;
    rucx_cq_h           cq;
} rucx_request_param_t;

enum rucx_cq_params_field {
    RUCX_CQ_PARAM_FIELD_CAPACITY = 1u << 0
};

typedef struct rucx_cq_params {
    uint64_t field_mask;
    size_t   capacity;   /* entries in the ring (default 1024, at least 1) */
} rucx_cq_params_t;

typedef enum rucx_cq_op {
    RUCX_CQ_OP_NONE         = 0,
    RUCX_CQ_OP_TAG_SEND     = 1,
    RUCX_CQ_OP_TAG_RECV     = 2,
    RUCX_CQ_OP_AM_SEND      = 3,
    RUCX_CQ_OP_AM_ARRIVAL   = 4,  /* Rust API only for now */
    RUCX_CQ_OP_AM_RECV_DATA = 5,
    RUCX_CQ_OP_STREAM_SEND  = 6,
    RUCX_CQ_OP_STREAM_RECV  = 7,
    RUCX_CQ_OP_PUT          = 8,
    RUCX_CQ_OP_GET          = 9,
    RUCX_CQ_OP_ATOMIC       = 10,
    RUCX_CQ_OP_FLUSH        = 11
} rucx_cq_op_t;

typedef struct rucx_cq_entry {
    void        *user_data; /* the operation's user_data */
    uint32_t     op;        /* rucx_cq_op_t */
    ucs_status_t status;
    size_t       length;    /* bytes sent or received (as sent: more than the buffer
                               when a receive was truncated), or accessed */
    ucp_tag_t    tag;       /* tag of a tag send; the sender's tag of a tag receive */
} rucx_cq_entry_t;

/* Creates a queue for operations of `worker` (any worker of the process may report into
 * it). params may be NULL. */
ucs_status_t rucx_cq_create(ucp_worker_h worker, const rucx_cq_params_t *params,
                            rucx_cq_h *cq_p);

/* Destroys a queue. Operations still naming it must have completed (their entries are
 * dropped with the queue). */
void rucx_cq_destroy(rucx_cq_h cq);

/* Moves up to `max` entries into `entries`; returns how many (0: none now), or a negative
 * ucs_status_t for a bad handle or array. Never blocks; progress the worker to complete
 * operations. */
ssize_t rucx_cq_poll(rucx_cq_h cq, rucx_cq_entry_t *entries, size_t max);

/* ====================================================================================== */

#ifdef __cplusplus
}
#endif

#endif
