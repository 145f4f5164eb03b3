/* Prints the size and field offsets of the UCT structs rucx's UCT C API reads or writes,
 * built against UCX's headers (Debian's libucx-dev). crates/capi/tests/uct_abi.rs
 * compares every line with the numbers of the Rust mirrors in
 * crates/capi/src/uct_api/ffi.rs (which also assert them at compile time). */
#include <uct/api/uct.h>
#include <stdio.h>
#include <stddef.h>

#define S(t)    printf("sizeof %s %zu\n", #t, sizeof(t))
#define O(t, f) printf("offsetof %s.%s %zu\n", #t, #f, offsetof(t, f))

int main(void)
{
    S(ucs_callbackq_elem_t); O(ucs_callbackq_elem_t, cb); O(ucs_callbackq_elem_t, arg);
    O(ucs_callbackq_elem_t, flags); O(ucs_callbackq_elem_t, id);
    S(ucs_callbackq_t); O(ucs_callbackq_t, fast_elems); O(ucs_callbackq_t, priv);
    S(uct_worker_t); O(uct_worker_t, progress_q);
    S(uct_iface_ops_t); O(uct_iface_ops_t, ep_put_short); O(uct_iface_ops_t, ep_get_zcopy);
    O(uct_iface_ops_t, ep_am_short); O(uct_iface_ops_t, ep_am_zcopy);
    O(uct_iface_ops_t, ep_atomic_cswap64); O(uct_iface_ops_t, ep_atomic64_fetch);
    O(uct_iface_ops_t, ep_tag_eager_short); O(uct_iface_ops_t, iface_tag_recv_cancel);
    O(uct_iface_ops_t, ep_pending_add); O(uct_iface_ops_t, ep_flush);
    O(uct_iface_ops_t, ep_check); O(uct_iface_ops_t, ep_create);
    O(uct_iface_ops_t, ep_destroy); O(uct_iface_ops_t, ep_connect_to_ep);
    O(uct_iface_ops_t, iface_reject); O(uct_iface_ops_t, iface_flush);
    O(uct_iface_ops_t, iface_progress); O(uct_iface_ops_t, iface_event_arm);
    O(uct_iface_ops_t, iface_close); O(uct_iface_ops_t, iface_query);
    O(uct_iface_ops_t, iface_is_reachable);
    S(uct_iface_t); O(uct_iface_t, ops);
    S(uct_ep_t); O(uct_ep_t, iface);
    S(uct_component_attr_t); O(uct_component_attr_t, field_mask); O(uct_component_attr_t, name);
    O(uct_component_attr_t, md_resource_count); O(uct_component_attr_t, md_resources);
    O(uct_component_attr_t, flags);
    S(uct_md_resource_desc_t);
    S(uct_tl_resource_desc_t); O(uct_tl_resource_desc_t, tl_name);
    O(uct_tl_resource_desc_t, dev_name); O(uct_tl_resource_desc_t, dev_type);
    O(uct_tl_resource_desc_t, sys_device);
    S(uct_iface_attr_t); O(uct_iface_attr_t, cap.put); O(uct_iface_attr_t, cap.get);
    O(uct_iface_attr_t, cap.am); O(uct_iface_attr_t, cap.tag);
    O(uct_iface_attr_t, cap.atomic32); O(uct_iface_attr_t, cap.atomic64);
    O(uct_iface_attr_t, cap.flags); O(uct_iface_attr_t, cap.event_flags);
    O(uct_iface_attr_t, device_addr_len); O(uct_iface_attr_t, iface_addr_len);
    O(uct_iface_attr_t, ep_addr_len); O(uct_iface_attr_t, max_conn_priv);
    O(uct_iface_attr_t, listen_sockaddr); O(uct_iface_attr_t, overhead);
    O(uct_iface_attr_t, bandwidth); O(uct_iface_attr_t, latency);
    O(uct_iface_attr_t, priority); O(uct_iface_attr_t, max_num_eps);
    O(uct_iface_attr_t, dev_num_paths);
    S(uct_iface_params_t); O(uct_iface_params_t, field_mask); O(uct_iface_params_t, cpu_mask);
    O(uct_iface_params_t, open_mode); O(uct_iface_params_t, mode.device.tl_name);
    O(uct_iface_params_t, mode.device.dev_name); O(uct_iface_params_t, stats_root);
    O(uct_iface_params_t, rx_headroom); O(uct_iface_params_t, err_handler_arg);
    O(uct_iface_params_t, features);
    S(uct_ep_params_t); O(uct_ep_params_t, field_mask); O(uct_ep_params_t, iface);
    O(uct_ep_params_t, user_data); O(uct_ep_params_t, dev_addr);
    O(uct_ep_params_t, iface_addr);
    S(uct_md_attr_t); O(uct_md_attr_t, cap.max_alloc); O(uct_md_attr_t, cap.max_reg);
    O(uct_md_attr_t, cap.flags); O(uct_md_attr_t, cap.reg_mem_types);
    O(uct_md_attr_t, cap.detect_mem_types); O(uct_md_attr_t, cap.alloc_mem_types);
    O(uct_md_attr_t, cap.access_mem_types); O(uct_md_attr_t, reg_cost);
    O(uct_md_attr_t, component_name); O(uct_md_attr_t, rkey_packed_size);
    O(uct_md_attr_t, local_cpus);
    S(uct_allocated_memory_t); O(uct_allocated_memory_t, address);
    O(uct_allocated_memory_t, length); O(uct_allocated_memory_t, method);
    O(uct_allocated_memory_t, mem_type); O(uct_allocated_memory_t, md);
    O(uct_allocated_memory_t, memh);
    S(uct_rkey_bundle_t); O(uct_rkey_bundle_t, rkey); O(uct_rkey_bundle_t, handle);
    O(uct_rkey_bundle_t, type);
    S(uct_completion_t); O(uct_completion_t, func); O(uct_completion_t, count);
    O(uct_completion_t, status);
    S(uct_pending_req_t); O(uct_pending_req_t, func); O(uct_pending_req_t, priv);
    S(uct_iov_t); O(uct_iov_t, buffer); O(uct_iov_t, length); O(uct_iov_t, memh);
    O(uct_iov_t, stride); O(uct_iov_t, count);
    return 0;
}
