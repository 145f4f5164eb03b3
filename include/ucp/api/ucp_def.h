/*
 * rucx — C headers of the UCX 1.13 API, written for rucx.
 * Handle types, callback types and a few structs of the UCP API.
 */
#ifndef UCP_DEF_H_
#define UCP_DEF_H_

#include <ucs/memory/memory_type.h>
#include <ucs/type/status.h>
#include <ucs/config/types.h>
#include <stddef.h>
#include <stdint.h>

/* Opaque handles. */
typedef struct ucp_context      *ucp_context_h;
typedef struct ucp_worker       *ucp_worker_h;
typedef struct ucp_ep           *ucp_ep_h;
typedef struct ucp_rkey         *ucp_rkey_h;
typedef struct ucp_mem          *ucp_mem_h;
typedef struct ucp_listener     *ucp_listener_h;
typedef struct ucp_conn_request *ucp_conn_request_h;
typedef struct ucp_recv_desc    *ucp_tag_message_h;
typedef struct ucp_config        ucp_config_t;
typedef struct ucp_address       ucp_address_t;

typedef struct ucp_tag_recv_info ucp_tag_recv_info_t;
typedef struct ucp_am_recv_param ucp_am_recv_param_t;

typedef uint64_t ucp_tag_t;
typedef uint64_t ucp_datatype_t;

/* How an endpoint reacts to a peer failure. */
typedef enum {
    UCP_ERR_HANDLING_MODE_NONE,
    UCP_ERR_HANDLING_MODE_PEER
} ucp_err_handling_mode_t;

/* Attributes of a memory handle (ucp_mem_query). */
typedef struct ucp_mem_attr {
    uint64_t          field_mask; /* ucp_mem_attr_field bits */
    void              *address;
    size_t            length;
    ucs_memory_type_t mem_type;
} ucp_mem_attr_t;

enum ucp_mem_attr_field {
    UCP_MEM_ATTR_FIELD_ADDRESS  = UCS_BIT(0),
    UCP_MEM_ATTR_FIELD_LENGTH   = UCS_BIT(1),
    UCP_MEM_ATTR_FIELD_MEM_TYPE = UCS_BIT(2)
};

/* Called once on the application's part of a request when its memory is first made. */
typedef void (*ucp_request_init_callback_t)(void *request);
/* Called on the application's part of a request before its memory is freed. */
typedef void (*ucp_request_cleanup_callback_t)(void *request);

/* Completion callbacks. `request` is the pointer the operation returned. */
typedef void (*ucp_send_callback_t)(void *request, ucs_status_t status);
typedef void (*ucp_send_nbx_callback_t)(void *request, ucs_status_t status,
                                        void *user_data);
typedef void (*ucp_stream_recv_callback_t)(void *request, ucs_status_t status,
                                           size_t length);
typedef void (*ucp_stream_recv_nbx_callback_t)(void *request, ucs_status_t status,
                                               size_t length, void *user_data);
typedef void (*ucp_tag_recv_callback_t)(void *request, ucs_status_t status,
                                        ucp_tag_recv_info_t *info);
typedef void (*ucp_tag_recv_nbx_callback_t)(void *request, ucs_status_t status,
                                            const ucp_tag_recv_info_t *tag_info,
                                            void *user_data);
typedef void (*ucp_am_recv_data_nbx_callback_t)(void *request, ucs_status_t status,
                                                size_t length, void *user_data);

/* Endpoint error handler. */
typedef void (*ucp_err_handler_cb_t)(void *arg, ucp_ep_h ep, ucs_status_t status);

typedef struct ucp_err_handler {
    ucp_err_handler_cb_t cb;
    void                 *arg;
} ucp_err_handler_t;

/* Listener callbacks (client–server connection establishment). */
typedef void (*ucp_listener_accept_callback_t)(ucp_ep_h ep, void *arg);
typedef void (*ucp_listener_conn_callback_t)(ucp_conn_request_h conn_request, void *arg);

typedef struct ucp_listener_conn_handler {
    ucp_listener_conn_callback_t cb;
    void                         *arg;
} ucp_listener_conn_handler_t;

/* Events a worker can wake up for. */
typedef enum ucp_wakeup_event_types {
    UCP_WAKEUP_RMA      = UCS_BIT(0),
    UCP_WAKEUP_AMO      = UCS_BIT(1),
    UCP_WAKEUP_TAG_SEND = UCS_BIT(2),
    UCP_WAKEUP_TAG_RECV = UCS_BIT(3),
    UCP_WAKEUP_TX       = UCS_BIT(10),
    UCP_WAKEUP_RX       = UCS_BIT(11),
    UCP_WAKEUP_EDGE     = UCS_BIT(16)
} ucp_wakeup_event_t;

/* Active-message handler of ucp_worker_set_am_handler (the older interface). */
typedef ucs_status_t (*ucp_am_callback_t)(void *arg, void *data, size_t length,
                                          ucp_ep_h reply_ep, unsigned flags);

/* Active-message handler of ucp_worker_set_am_recv_handler. */
typedef ucs_status_t (*ucp_am_recv_callback_t)(void *arg, const void *header,
                                               size_t header_length, void *data,
                                               size_t length,
                                               const ucp_am_recv_param_t *param);

/* Endpoint creation parameters; fields count only if their bit is in field_mask. */
typedef struct ucp_ep_params {
    uint64_t                field_mask;     /* ucp_ep_params_field bits */
    const ucp_address_t     *address;       /* remote worker address */
    ucp_err_handling_mode_t err_mode;
    ucp_err_handler_t       err_handler;
    void                    *user_data;
    unsigned                flags;          /* ucp_ep_params_flags_field bits */
    ucs_sock_addr_t         sockaddr;       /* server address (client–server) */
    ucp_conn_request_h      conn_request;   /* accepted connection (server side) */
    const char              *name;
    ucs_sock_addr_t         local_sockaddr;
} ucp_ep_params_t;

#define UCP_ENTITY_NAME_MAX 32

#endif
