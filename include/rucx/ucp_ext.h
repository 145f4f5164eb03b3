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

#ifdef __cplusplus
}
#endif

#endif
