/* Prints the size and field offsets of every struct of the UCP API, and the values of
 * its enums and macros, one per line. Built once with UCX's headers and once with
 * rucx's; the two outputs must be identical (crates/capi/tests/c_abi.rs compares them
 * and also checks the numbers against the Rust mirrors' compile-time assertions). */
#include <ucp/api/ucp.h>
#include <ucm/api/ucm.h>
#include <stdio.h>
#include <stddef.h>

#define S(t)    printf("sizeof %s %zu align %zu\n", #t, sizeof(t), _Alignof(t))
#define O(t, f) printf("offsetof %s.%s %zu size %zu\n", #t, #f, offsetof(t, f), sizeof(((t*)0)->f))
#define V(x)    printf("value %s %lld\n", #x, (long long)(x))

int main(void)
{
    S(ucs_status_t); S(ucs_thread_mode_t); S(ucs_memory_type_t); S(ucs_cpu_set_t);
    S(ucs_sock_addr_t); O(ucs_sock_addr_t, addr); O(ucs_sock_addr_t, addrlen);
    S(ucp_params_t); O(ucp_params_t, field_mask); O(ucp_params_t, features);
    O(ucp_params_t, request_size); O(ucp_params_t, request_init);
    O(ucp_params_t, request_cleanup); O(ucp_params_t, tag_sender_mask);
    O(ucp_params_t, mt_workers_shared); O(ucp_params_t, estimated_num_eps);
    O(ucp_params_t, estimated_num_ppn); O(ucp_params_t, name);
    S(ucp_lib_attr_t); O(ucp_lib_attr_t, max_thread_level);
    S(ucp_context_attr_t); O(ucp_context_attr_t, request_size);
    O(ucp_context_attr_t, thread_mode); O(ucp_context_attr_t, memory_types);
    O(ucp_context_attr_t, name);
    S(ucp_worker_params_t); O(ucp_worker_params_t, thread_mode);
    O(ucp_worker_params_t, cpu_mask); O(ucp_worker_params_t, events);
    O(ucp_worker_params_t, user_data); O(ucp_worker_params_t, event_fd);
    O(ucp_worker_params_t, flags); O(ucp_worker_params_t, name);
    O(ucp_worker_params_t, am_alignment); O(ucp_worker_params_t, client_id);
    S(ucp_worker_attr_t); O(ucp_worker_attr_t, thread_mode);
    O(ucp_worker_attr_t, address_flags); O(ucp_worker_attr_t, address);
    O(ucp_worker_attr_t, address_length); O(ucp_worker_attr_t, max_am_header);
    O(ucp_worker_attr_t, name); O(ucp_worker_attr_t, max_debug_string);
    S(ucp_worker_address_attr_t); O(ucp_worker_address_attr_t, worker_uid);
    S(ucp_err_handler_t); O(ucp_err_handler_t, cb); O(ucp_err_handler_t, arg);
    S(ucp_ep_params_t); O(ucp_ep_params_t, address); O(ucp_ep_params_t, err_mode);
    O(ucp_ep_params_t, err_handler); O(ucp_ep_params_t, user_data);
    O(ucp_ep_params_t, flags); O(ucp_ep_params_t, sockaddr);
    O(ucp_ep_params_t, conn_request); O(ucp_ep_params_t, name);
    O(ucp_ep_params_t, local_sockaddr);
    S(ucp_ep_attr_t); O(ucp_ep_attr_t, name); O(ucp_ep_attr_t, local_sockaddr);
    O(ucp_ep_attr_t, remote_sockaddr);
    S(ucp_ep_evaluate_perf_param_t); O(ucp_ep_evaluate_perf_param_t, message_size);
    S(ucp_ep_evaluate_perf_attr_t); O(ucp_ep_evaluate_perf_attr_t, estimated_time);
    S(ucp_listener_accept_handler_t); S(ucp_listener_conn_handler_t);
    S(ucp_listener_params_t); O(ucp_listener_params_t, sockaddr);
    O(ucp_listener_params_t, accept_handler); O(ucp_listener_params_t, conn_handler);
    S(ucp_listener_attr_t); O(ucp_listener_attr_t, sockaddr);
    S(ucp_conn_request_attr_t); O(ucp_conn_request_attr_t, client_address);
    O(ucp_conn_request_attr_t, client_id);
    S(ucp_mem_map_params_t); O(ucp_mem_map_params_t, address);
    O(ucp_mem_map_params_t, length); O(ucp_mem_map_params_t, flags);
    O(ucp_mem_map_params_t, prot); O(ucp_mem_map_params_t, memory_type);
    S(ucp_mem_attr_t); O(ucp_mem_attr_t, address); O(ucp_mem_attr_t, length);
    O(ucp_mem_attr_t, mem_type);
    S(ucp_mem_advise_params_t); O(ucp_mem_advise_params_t, address);
    O(ucp_mem_advise_params_t, length); O(ucp_mem_advise_params_t, advice);
    S(ucp_dt_iov_t); O(ucp_dt_iov_t, buffer); O(ucp_dt_iov_t, length);
    S(ucp_generic_dt_ops_t); O(ucp_generic_dt_ops_t, start_pack);
    O(ucp_generic_dt_ops_t, start_unpack); O(ucp_generic_dt_ops_t, packed_size);
    O(ucp_generic_dt_ops_t, pack); O(ucp_generic_dt_ops_t, unpack);
    O(ucp_generic_dt_ops_t, finish);
    S(ucp_tag_recv_info_t); O(ucp_tag_recv_info_t, sender_tag); O(ucp_tag_recv_info_t, length);
    S(ucp_request_param_t); O(ucp_request_param_t, op_attr_mask);
    O(ucp_request_param_t, flags); O(ucp_request_param_t, request);
    O(ucp_request_param_t, cb); O(ucp_request_param_t, datatype);
    O(ucp_request_param_t, user_data); O(ucp_request_param_t, reply_buffer);
    O(ucp_request_param_t, memory_type); O(ucp_request_param_t, recv_info);
    O(ucp_request_param_t, memh);
    S(ucp_request_attr_t); O(ucp_request_attr_t, debug_string);
    O(ucp_request_attr_t, debug_string_size); O(ucp_request_attr_t, status);
    O(ucp_request_attr_t, mem_type);
    S(ucp_am_handler_param_t); O(ucp_am_handler_param_t, id);
    O(ucp_am_handler_param_t, flags); O(ucp_am_handler_param_t, cb);
    O(ucp_am_handler_param_t, arg);
    S(ucp_am_recv_param_t); O(ucp_am_recv_param_t, recv_attr); O(ucp_am_recv_param_t, reply_ep);
    S(ucp_stream_poll_ep_t); O(ucp_stream_poll_ep_t, user_data);
    O(ucp_stream_poll_ep_t, flags); O(ucp_stream_poll_ep_t, reserved);
    S(ucm_event_t);

    V(UCS_OK); V(UCS_INPROGRESS); V(UCS_ERR_NO_MESSAGE); V(UCS_ERR_NO_RESOURCE);
    V(UCS_ERR_IO_ERROR); V(UCS_ERR_NO_MEMORY); V(UCS_ERR_INVALID_PARAM);
    V(UCS_ERR_UNREACHABLE); V(UCS_ERR_INVALID_ADDR); V(UCS_ERR_NOT_IMPLEMENTED);
    V(UCS_ERR_MESSAGE_TRUNCATED); V(UCS_ERR_NO_PROGRESS); V(UCS_ERR_BUFFER_TOO_SMALL);
    V(UCS_ERR_NO_ELEM); V(UCS_ERR_SOME_CONNECTS_FAILED); V(UCS_ERR_NO_DEVICE);
    V(UCS_ERR_BUSY); V(UCS_ERR_CANCELED); V(UCS_ERR_SHMEM_SEGMENT);
    V(UCS_ERR_ALREADY_EXISTS); V(UCS_ERR_OUT_OF_RANGE); V(UCS_ERR_TIMED_OUT);
    V(UCS_ERR_EXCEEDS_LIMIT); V(UCS_ERR_UNSUPPORTED); V(UCS_ERR_REJECTED);
    V(UCS_ERR_NOT_CONNECTED); V(UCS_ERR_CONNECTION_RESET); V(UCS_ERR_FIRST_LINK_FAILURE);
    V(UCS_ERR_LAST_LINK_FAILURE); V(UCS_ERR_FIRST_ENDPOINT_FAILURE);
    V(UCS_ERR_ENDPOINT_TIMEOUT); V(UCS_ERR_LAST_ENDPOINT_FAILURE); V(UCS_ERR_LAST);
    V(UCS_THREAD_MODE_SINGLE); V(UCS_THREAD_MODE_SERIALIZED); V(UCS_THREAD_MODE_MULTI);
    V(UCS_MEMORY_TYPE_HOST); V(UCS_MEMORY_TYPE_UNKNOWN);
    V(UCP_PARAM_FIELD_FEATURES); V(UCP_PARAM_FIELD_REQUEST_SIZE); V(UCP_PARAM_FIELD_NAME);
    V(UCP_PARAM_FIELD_REQUEST_INIT); V(UCP_PARAM_FIELD_REQUEST_CLEANUP);
    V(UCP_PARAM_FIELD_TAG_SENDER_MASK); V(UCP_PARAM_FIELD_MT_WORKERS_SHARED);
    V(UCP_PARAM_FIELD_ESTIMATED_NUM_EPS); V(UCP_PARAM_FIELD_ESTIMATED_NUM_PPN);
    V(UCP_FEATURE_TAG); V(UCP_FEATURE_RMA); V(UCP_FEATURE_AMO32); V(UCP_FEATURE_AMO64);
    V(UCP_FEATURE_WAKEUP); V(UCP_FEATURE_STREAM); V(UCP_FEATURE_AM);
    V(UCP_WORKER_PARAM_FIELD_THREAD_MODE); V(UCP_WORKER_PARAM_FIELD_CPU_MASK);
    V(UCP_WORKER_PARAM_FIELD_EVENTS); V(UCP_WORKER_PARAM_FIELD_USER_DATA);
    V(UCP_WORKER_PARAM_FIELD_EVENT_FD); V(UCP_WORKER_PARAM_FIELD_FLAGS);
    V(UCP_WORKER_PARAM_FIELD_NAME); V(UCP_WORKER_PARAM_FIELD_AM_ALIGNMENT);
    V(UCP_WORKER_PARAM_FIELD_CLIENT_ID); V(UCP_WORKER_FLAG_IGNORE_REQUEST_LEAK);
    V(UCP_LISTENER_PARAM_FIELD_SOCK_ADDR); V(UCP_LISTENER_PARAM_FIELD_ACCEPT_HANDLER);
    V(UCP_LISTENER_PARAM_FIELD_CONN_HANDLER); V(UCP_WORKER_ADDRESS_FLAG_NET_ONLY);
    V(UCP_EP_PARAM_FIELD_REMOTE_ADDRESS); V(UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE);
    V(UCP_EP_PARAM_FIELD_ERR_HANDLER); V(UCP_EP_PARAM_FIELD_USER_DATA);
    V(UCP_EP_PARAM_FIELD_SOCK_ADDR); V(UCP_EP_PARAM_FIELD_FLAGS);
    V(UCP_EP_PARAM_FIELD_CONN_REQUEST); V(UCP_EP_PARAM_FIELD_NAME);
    V(UCP_EP_PARAM_FIELD_LOCAL_SOCK_ADDR); V(UCP_EP_PARAMS_FLAGS_CLIENT_SERVER);
    V(UCP_EP_PARAMS_FLAGS_NO_LOOPBACK); V(UCP_EP_PARAMS_FLAGS_SEND_CLIENT_ID);
    V(UCP_EP_CLOSE_FLAG_FORCE); V(UCP_EP_CLOSE_MODE_FORCE); V(UCP_EP_CLOSE_MODE_FLUSH);
    V(UCP_EP_PERF_PARAM_FIELD_MESSAGE_SIZE); V(UCP_EP_PERF_ATTR_FIELD_ESTIMATED_TIME);
    V(UCP_MEM_MAP_PARAM_FIELD_ADDRESS); V(UCP_MEM_MAP_PARAM_FIELD_LENGTH);
    V(UCP_MEM_MAP_PARAM_FIELD_FLAGS); V(UCP_MEM_MAP_PARAM_FIELD_PROT);
    V(UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE); V(UCP_MEM_ADVISE_PARAM_FIELD_ADDRESS);
    V(UCP_MEM_ADVISE_PARAM_FIELD_LENGTH); V(UCP_MEM_ADVISE_PARAM_FIELD_ADVICE);
    V(UCP_LIB_ATTR_FIELD_MAX_THREAD_LEVEL); V(UCP_ATTR_FIELD_REQUEST_SIZE);
    V(UCP_ATTR_FIELD_THREAD_MODE); V(UCP_ATTR_FIELD_MEMORY_TYPES); V(UCP_ATTR_FIELD_NAME);
    V(UCP_WORKER_ATTR_FIELD_THREAD_MODE); V(UCP_WORKER_ATTR_FIELD_ADDRESS);
    V(UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS); V(UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER);
    V(UCP_WORKER_ATTR_FIELD_NAME); V(UCP_WORKER_ATTR_FIELD_MAX_INFO_STRING);
    V(UCP_WORKER_ADDRESS_ATTR_FIELD_UID); V(UCP_LISTENER_ATTR_FIELD_SOCKADDR);
    V(UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR); V(UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ID);
    V(UCP_DATATYPE_CONTIG); V(UCP_DATATYPE_STRIDED); V(UCP_DATATYPE_IOV);
    V(UCP_DATATYPE_GENERIC); V(UCP_DATATYPE_SHIFT); V(UCP_DATATYPE_CLASS_MASK);
    V(ucp_dt_make_contig(8)); V(ucp_dt_make_iov());
    V(UCP_MEM_MAP_NONBLOCK); V(UCP_MEM_MAP_ALLOCATE); V(UCP_MEM_MAP_FIXED);
    V(UCP_MEM_MAP_PROT_LOCAL_READ); V(UCP_MEM_MAP_PROT_LOCAL_WRITE);
    V(UCP_MEM_MAP_PROT_REMOTE_READ); V(UCP_MEM_MAP_PROT_REMOTE_WRITE);
    V(UCP_AM_FLAG_WHOLE_MSG); V(UCP_AM_FLAG_PERSISTENT_DATA); V(UCP_AM_SEND_FLAG_REPLY);
    V(UCP_AM_SEND_FLAG_EAGER); V(UCP_AM_SEND_FLAG_RNDV); V(UCP_AM_SEND_REPLY);
    V(UCP_CB_PARAM_FLAG_DATA);
    V(UCP_ATOMIC_POST_OP_ADD); V(UCP_ATOMIC_POST_OP_AND); V(UCP_ATOMIC_POST_OP_OR);
    V(UCP_ATOMIC_POST_OP_XOR); V(UCP_ATOMIC_POST_OP_LAST);
    V(UCP_ATOMIC_FETCH_OP_FADD); V(UCP_ATOMIC_FETCH_OP_SWAP); V(UCP_ATOMIC_FETCH_OP_CSWAP);
    V(UCP_ATOMIC_FETCH_OP_FAND); V(UCP_ATOMIC_FETCH_OP_FOR); V(UCP_ATOMIC_FETCH_OP_FXOR);
    V(UCP_ATOMIC_FETCH_OP_LAST);
    V(UCP_ATOMIC_OP_ADD); V(UCP_ATOMIC_OP_SWAP); V(UCP_ATOMIC_OP_CSWAP); V(UCP_ATOMIC_OP_AND);
    V(UCP_ATOMIC_OP_OR); V(UCP_ATOMIC_OP_XOR); V(UCP_ATOMIC_OP_LAST);
    V(UCP_STREAM_RECV_FLAG_WAITALL);
    V(UCP_OP_ATTR_FIELD_REQUEST); V(UCP_OP_ATTR_FIELD_CALLBACK); V(UCP_OP_ATTR_FIELD_USER_DATA);
    V(UCP_OP_ATTR_FIELD_DATATYPE); V(UCP_OP_ATTR_FIELD_FLAGS);
    V(UCP_OP_ATTR_FIELD_REPLY_BUFFER); V(UCP_OP_ATTR_FIELD_MEMORY_TYPE);
    V(UCP_OP_ATTR_FIELD_RECV_INFO); V(UCP_OP_ATTR_FIELD_MEMH);
    V(UCP_OP_ATTR_FLAG_NO_IMM_CMPL); V(UCP_OP_ATTR_FLAG_FAST_CMPL);
    V(UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL); V(UCP_OP_ATTR_FLAG_MULTI_SEND);
    V(UCP_REQUEST_ATTR_FIELD_INFO_STRING); V(UCP_REQUEST_ATTR_FIELD_INFO_STRING_SIZE);
    V(UCP_REQUEST_ATTR_FIELD_STATUS); V(UCP_REQUEST_ATTR_FIELD_MEM_TYPE);
    V(UCP_AM_RECV_ATTR_FIELD_REPLY_EP); V(UCP_AM_RECV_ATTR_FLAG_DATA);
    V(UCP_AM_RECV_ATTR_FLAG_RNDV);
    V(UCP_AM_HANDLER_PARAM_FIELD_ID); V(UCP_AM_HANDLER_PARAM_FIELD_FLAGS);
    V(UCP_AM_HANDLER_PARAM_FIELD_CB); V(UCP_AM_HANDLER_PARAM_FIELD_ARG);
    V(UCP_MEM_ATTR_FIELD_ADDRESS); V(UCP_MEM_ATTR_FIELD_LENGTH); V(UCP_MEM_ATTR_FIELD_MEM_TYPE);
    V(UCP_ERR_HANDLING_MODE_NONE); V(UCP_ERR_HANDLING_MODE_PEER);
    V(UCP_WAKEUP_RMA); V(UCP_WAKEUP_AMO); V(UCP_WAKEUP_TAG_SEND); V(UCP_WAKEUP_TAG_RECV);
    V(UCP_WAKEUP_TX); V(UCP_WAKEUP_RX); V(UCP_WAKEUP_EDGE);
    V(UCP_MADV_NORMAL); V(UCP_MADV_WILLNEED); V(UCP_ENTITY_NAME_MAX);
    V(UCP_API_MAJOR); V(UCP_API_MINOR); V(UCP_API_VERSION);
    V(UCS_CONFIG_PRINT_CONFIG); V(UCS_CONFIG_PRINT_HEADER); V(UCS_CONFIG_PRINT_DOC);
    V(UCS_CONFIG_PRINT_HIDDEN); V(UCS_CONFIG_PRINT_COMMENT_DEFAULT);
    V(UCS_LOG_LEVEL_INFO); V(UCS_LOG_LEVEL_PRINT);
    V(UCM_EVENT_VM_MAPPED); V(UCM_EVENT_VM_UNMAPPED); V(UCM_EVENT_MEM_TYPE_FREE);
    V(UCM_EVENT_FLAG_EXISTING_ALLOC);
    V(UCS_PTR_IS_ERR(UCS_STATUS_PTR(UCS_ERR_NO_MEMORY)));
    V(UCS_PTR_IS_PTR(UCS_STATUS_PTR(UCS_ERR_NO_MEMORY)));
    V(UCS_PTR_IS_PTR((void*)0)); V(UCS_PTR_IS_PTR((void*)4096));
    V(UCS_PTR_STATUS((void*)4096)); V(UCS_PTR_STATUS(UCS_STATUS_PTR(UCS_ERR_CANCELED)));
    return 0;
}
