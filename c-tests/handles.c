/* Misuse must give an error status, never a crash: null handles, destroyed handles,
 * handles of another kind, stale requests, malformed addresses and keys; plus the
 * configuration functions, the version functions, and socket addresses of a family rucx
 * does not connect to reporting UCS_ERR_UNSUPPORTED. One process. */
#include "common.h"
#include <netinet/in.h>
#include <sys/un.h>

static void conn_cb(ucp_conn_request_h req, void *arg)
{
    (void)req;
    (void)arg;
}

int main(void)
{
    ucp_params_t params;
    ucp_worker_params_t wparams;
    ucp_ep_params_t eparams;
    ucp_listener_params_t lparams;
    ucp_context_h ctx, dead_ctx;
    ucp_worker_h worker, dead_worker;
    ucp_ep_h ep, dead_ep;
    ucp_config_t *config;
    ucp_listener_h listener;
    ucp_address_t *addr;
    ucp_mem_h memh;
    ucp_mem_map_params_t mp;
    ucp_request_param_t p;
    ucp_rkey_h rkey;
    size_t addr_len;
    char garbage[256], buf[64];
    struct sockaddr_in sin;
    struct sockaddr_un sun;
    void *r;
    unsigned major = 0, minor = 0, release = 0;

    ucp_get_version(&major, &minor, &release);
    CHECK(major == 1 && minor == 13, "version %u.%u", major, minor);
    ucp_get_version(NULL, NULL, NULL);
    CHECK(strstr(ucp_get_version_string(), "1.13") != NULL, "version string");
    printf("library: %s\n", ucp_get_version_string());
    CHECK(strcmp(ucs_status_string(UCS_ERR_NO_MEMORY), "Out of memory") == 0, "status string");
    CHECK(ucs_status_string((ucs_status_t)-30) != NULL, "unknown status string");

    /* configuration */
    CHECK_OK(ucp_config_read(NULL, NULL, &config));
    CHECK_OK(ucp_config_modify(config, "TLS", "self,shm"));
    CHECK(ucp_config_modify(config, "NO_SUCH_VARIABLE", "1") == UCS_ERR_NO_ELEM, "unknown name");
    CHECK(ucp_config_modify(config, "RNDV_THRESH", "not-a-size") != UCS_OK, "bad value");
    ucp_config_print(config, stdout, "handles test", UCS_CONFIG_PRINT_CONFIG | UCS_CONFIG_PRINT_HEADER);
    CHECK(ucp_config_modify(NULL, "TLS", "shm") == UCS_ERR_INVALID_PARAM, "null config");

    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features   = UCP_FEATURE_TAG | UCP_FEATURE_RMA;
    CHECK(ucp_init(NULL, NULL, &ctx) == UCS_ERR_INVALID_PARAM, "null params");
    params.features = 0;
    CHECK(ucp_init(&params, NULL, &ctx) != UCS_OK, "no features");
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_RMA;
    CHECK_OK(ucp_init(&params, config, &dead_ctx));
    ucp_cleanup(dead_ctx);
    ucp_config_release(config);
    ucp_config_release(config);   /* twice: ignored */
    CHECK_OK(ucp_init(&params, NULL, &ctx));

    /* destroyed and null contexts */
    memset(&wparams, 0, sizeof(wparams));
    CHECK(ucp_worker_create(dead_ctx, &wparams, &worker) == UCS_ERR_INVALID_PARAM, "dead ctx");
    CHECK(ucp_worker_create(NULL, &wparams, &worker) == UCS_ERR_INVALID_PARAM, "null ctx");
    ucp_cleanup(dead_ctx); /* twice */
    ucp_cleanup(NULL);

    CHECK_OK(ucp_worker_create(ctx, &wparams, &dead_worker));
    ucp_worker_destroy(dead_worker);
    ucp_worker_destroy(dead_worker); /* twice */
    ucp_worker_destroy(NULL);
    CHECK(ucp_worker_progress(dead_worker) == 0, "progress of a dead worker");
    CHECK(ucp_worker_progress(NULL) == 0, "progress of null");
    CHECK(ucp_worker_get_address(dead_worker, &addr, &addr_len) == UCS_ERR_INVALID_PARAM,
          "address of a dead worker");
    CHECK_OK(ucp_worker_create(ctx, &wparams, &worker));

    /* a context where a worker is expected (another kind of handle) */
    CHECK(ucp_worker_progress((ucp_worker_h)ctx) == 0, "wrong kind");
    CHECK(ucp_worker_arm((ucp_worker_h)ctx) == UCS_ERR_INVALID_PARAM, "wrong kind");

    /* endpoints: garbage address, null, then a real one to ourselves */
    memset(garbage, 0x5a, sizeof(garbage));
    memset(&eparams, 0, sizeof(eparams));
    eparams.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    eparams.address    = (ucp_address_t*)garbage;
    CHECK(ucp_ep_create(worker, &eparams, &ep) != UCS_OK, "garbage address accepted");
    eparams.address = NULL;
    CHECK(ucp_ep_create(worker, &eparams, &ep) != UCS_OK, "null address accepted");
    CHECK_OK(ucp_worker_get_address(worker, &addr, &addr_len));
    eparams.address = addr;
    CHECK_OK(ucp_ep_create(worker, &eparams, &dead_ep));
    r = ucp_ep_close_nb(dead_ep, UCP_EP_CLOSE_MODE_FORCE);
    CHECK(!UCS_PTR_IS_ERR(r), "close");
    CHECK_OK(ucp_ep_create(worker, &eparams, &ep));
    ucp_worker_release_address(worker, addr);

    /* operations on a closed endpoint, on a worker handle as endpoint, on null */
    memset(&p, 0, sizeof(p));
    r = ucp_tag_send_nbx(dead_ep, buf, 8, 1, &p);
    CHECK(UCS_PTR_IS_ERR(r) && UCS_PTR_STATUS(r) == UCS_ERR_INVALID_PARAM, "send on closed ep");
    r = ucp_tag_send_nbx((ucp_ep_h)worker, buf, 8, 1, &p);
    CHECK(UCS_PTR_STATUS(r) == UCS_ERR_INVALID_PARAM, "send on a worker handle");
    r = ucp_tag_send_nbx(NULL, buf, 8, 1, &p);
    CHECK(UCS_PTR_STATUS(r) == UCS_ERR_INVALID_PARAM, "send on null");
    r = ucp_tag_send_nbx(ep, buf, 8, 1, NULL);
    CHECK(UCS_PTR_STATUS(r) == UCS_ERR_INVALID_PARAM, "null param");
    r = ucp_ep_close_nb(dead_ep, UCP_EP_CLOSE_MODE_FORCE);
    CHECK(UCS_PTR_STATUS(r) == UCS_ERR_INVALID_PARAM, "double close");

    /* requests: null, error pointers, completed and freed */
    CHECK(ucp_request_check_status(NULL) == UCS_ERR_INVALID_PARAM, "null request");
    CHECK(ucp_request_check_status(UCS_STATUS_PTR(UCS_ERR_NO_MEMORY)) == UCS_ERR_INVALID_PARAM,
          "error pointer as request");
    ucp_request_free(NULL);
    ucp_request_free(UCS_STATUS_PTR(UCS_ERR_IO_ERROR));
    ucp_request_cancel(worker, NULL);
    r = ucp_tag_recv_nbx(worker, buf, sizeof(buf), 99, (ucp_tag_t)-1, &p);
    CHECK(UCS_PTR_IS_PTR(r), "receive");
    ucp_request_cancel(worker, r);
    while (ucp_request_check_status(r) == UCS_INPROGRESS) {
        ucp_worker_progress(worker);
    }
    CHECK(ucp_request_check_status(r) == UCS_ERR_CANCELED, "cancel");
    ucp_request_free(r);
    CHECK(ucp_request_check_status(r) == UCS_ERR_INVALID_PARAM, "freed request");
    ucp_request_free(r); /* twice */

    /* an unsupported datatype class */
    p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    p.datatype     = UCP_DATATYPE_STRIDED;
    r = ucp_tag_send_nbx(ep, buf, 1, 1, &p);
    CHECK(UCS_PTR_IS_ERR(r), "strided datatype");
    ucp_dt_destroy(UCP_DATATYPE_GENERIC | 0x1000); /* not ours: ignored */

    /* memory: bad keys and handles */
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.length     = 4096;
    CHECK_OK(ucp_mem_map(ctx, &mp, &memh));
    CHECK(ucp_ep_rkey_unpack(ep, garbage, &rkey) == UCS_ERR_INVALID_PARAM, "garbage key");
    CHECK_OK(ucp_mem_unmap(ctx, memh));
    CHECK(ucp_mem_unmap(ctx, memh) == UCS_ERR_INVALID_PARAM, "double unmap");
    CHECK(ucp_mem_map(ctx, NULL, &memh) == UCS_ERR_INVALID_PARAM, "null mem_map params");
    mp.field_mask = 0;
    CHECK(ucp_mem_map(ctx, &mp, &memh) == UCS_ERR_INVALID_PARAM, "no length");
    ucp_rkey_destroy(NULL);
    ucp_rkey_buffer_release(garbage);

    /* listeners and client–server endpoints: bad parameters, unsupported families */
    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    memset(&lparams, 0, sizeof(lparams));
    lparams.field_mask       = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR;
    lparams.sockaddr.addr    = (struct sockaddr*)&sun;
    lparams.sockaddr.addrlen = sizeof(sun);
    CHECK(ucp_listener_create(worker, &lparams, &listener) != UCS_OK, "listener without handler");
    lparams.field_mask |= UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lparams.conn_handler.cb = conn_cb;
    CHECK(ucp_listener_create(worker, &lparams, &listener) == UCS_ERR_UNSUPPORTED,
          "AF_UNIX listener");
    memset(&sin, 0, sizeof(sin));
    sin.sin_family           = AF_INET;
    lparams.sockaddr.addr    = (struct sockaddr*)&sin;
    lparams.sockaddr.addrlen = 3; /* too short */
    CHECK(ucp_listener_create(worker, &lparams, &listener) == UCS_ERR_INVALID_PARAM,
          "short socket address");
    CHECK(ucp_listener_query(NULL, NULL) == UCS_ERR_INVALID_PARAM, "null listener");
    CHECK(ucp_conn_request_query(NULL, NULL) == UCS_ERR_INVALID_PARAM, "null request");
    ucp_listener_destroy(NULL);
    memset(&eparams, 0, sizeof(eparams));
    eparams.field_mask       = UCP_EP_PARAM_FIELD_SOCK_ADDR;
    eparams.sockaddr.addr    = (struct sockaddr*)&sun;
    eparams.sockaddr.addrlen = sizeof(sun);
    CHECK(ucp_ep_create(worker, &eparams, &dead_ep) == UCS_ERR_UNSUPPORTED, "AF_UNIX ep");

    ucp_ep_destroy(ep);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    printf("handles test passed\n");
    return 0;
}
