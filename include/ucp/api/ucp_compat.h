/*
 * rucx — C headers of the UCX 1.13 API, written for rucx.
 * Older functions UCX keeps for compatibility; rucx implements them too.
 */
#ifndef UCP_COMPAT_H_
#define UCP_COMPAT_H_

#include <ucp/api/ucp_def.h>
#include <ucs/sys/compiler_def.h>

BEGIN_C_DECLS

typedef struct ucp_listener_accept_handler {
    ucp_listener_accept_callback_t cb;
    void                           *arg;
} ucp_listener_accept_handler_t;

int ucp_request_is_completed(void *request);
void ucp_request_release(void *request);
void ucp_ep_destroy(ucp_ep_h ep);
ucs_status_ptr_t ucp_disconnect_nb(ucp_ep_h ep);
ucs_status_t ucp_request_test(void *request, ucp_tag_recv_info_t *info);
ucs_status_t ucp_ep_flush(ucp_ep_h ep);
ucs_status_t ucp_worker_flush(ucp_worker_h worker);
ucs_status_t ucp_put(ucp_ep_h ep, const void *buffer, size_t length,
                     uint64_t remote_addr, ucp_rkey_h rkey);
ucs_status_t ucp_get(ucp_ep_h ep, void *buffer, size_t length,
                     uint64_t remote_addr, ucp_rkey_h rkey);
ucs_status_t ucp_atomic_add32(ucp_ep_h ep, uint32_t add, uint64_t remote_addr,
                              ucp_rkey_h rkey);
ucs_status_t ucp_atomic_add64(ucp_ep_h ep, uint64_t add, uint64_t remote_addr,
                              ucp_rkey_h rkey);
ucs_status_t ucp_atomic_fadd32(ucp_ep_h ep, uint32_t add, uint64_t remote_addr,
                               ucp_rkey_h rkey, uint32_t *result);
ucs_status_t ucp_atomic_fadd64(ucp_ep_h ep, uint64_t add, uint64_t remote_addr,
                               ucp_rkey_h rkey, uint64_t *result);
ucs_status_t ucp_atomic_swap32(ucp_ep_h ep, uint32_t swap, uint64_t remote_addr,
                               ucp_rkey_h rkey, uint32_t *result);
ucs_status_t ucp_atomic_swap64(ucp_ep_h ep, uint64_t swap, uint64_t remote_addr,
                               ucp_rkey_h rkey, uint64_t *result);
ucs_status_t ucp_atomic_cswap32(ucp_ep_h ep, uint32_t compare, uint32_t swap,
                                uint64_t remote_addr, ucp_rkey_h rkey, uint32_t *result);
ucs_status_t ucp_atomic_cswap64(ucp_ep_h ep, uint64_t compare, uint64_t swap,
                                uint64_t remote_addr, ucp_rkey_h rkey, uint64_t *result);
/* rucx: always UCS_ERR_UNSUPPORTED. */
ucs_status_ptr_t ucp_ep_modify_nb(ucp_ep_h ep, const ucp_ep_params_t *params);

END_C_DECLS

#endif
