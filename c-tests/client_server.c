/* Client–server connection establishment: the server listens on 127.0.0.1 (any port,
 * found with ucp_listener_query), the client creates its endpoint from the socket
 * address, the server's connection handler inspects the request
 * (ucp_conn_request_query), accepts the first connection with ucp_ep_create and
 * rejects the second with ucp_listener_reject; tag messages both ways on the accepted
 * connection, and ucp_ep_query of the peer's address. */
#include "common.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <ucs/sys/sock.h>

static ucp_context_h ctx;
static ucp_worker_h worker;
static ucp_listener_h listener;
static ucp_conn_request_h pending;
static int requests;

static void setup(void)
{
    ucp_params_t params;
    ucp_worker_params_t wparams;
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features   = UCP_FEATURE_TAG;
    CHECK_OK(ucp_init(&params, NULL, &ctx));
    memset(&wparams, 0, sizeof(wparams));
    CHECK_OK(ucp_worker_create(ctx, &wparams, &worker));
}

static void teardown(void)
{
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
}

static int ep_failed;

static void err_handler(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    CHECK(status != UCS_OK, "error handler with UCS_OK");
    ep_failed++;
    (void)arg;
    (void)ep;
}

static ucs_status_t wait_op(void *r)
{
    ucs_status_t st;
    if (r == NULL) {
        return UCS_OK;
    }
    if (UCS_PTR_IS_ERR(r)) {
        return UCS_PTR_STATUS(r);
    }
    while ((st = ucp_request_check_status(r)) == UCS_INPROGRESS) {
        ucp_worker_progress(worker);
    }
    ucp_request_free(r);
    return st;
}

static void conn_handler(ucp_conn_request_h req, void *arg)
{
    ucp_conn_request_attr_t attr;
    char text[128];
    attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
    CHECK_OK(ucp_conn_request_query(req, &attr));
    CHECK(attr.client_address.ss_family == AF_INET, "client family %d",
          attr.client_address.ss_family);
    ucs_sockaddr_str((struct sockaddr*)&attr.client_address, text, sizeof(text));
    CHECK(strncmp(text, "127.0.0.1:", 10) == 0, "client address %s", text);
    CHECK(arg == (void*)&ctx, "handler argument");
    pending = req;
    requests++;
}

static int server(int fd)
{
    ucp_listener_params_t lp;
    ucp_listener_attr_t la;
    ucp_ep_params_t ep_params;
    ucp_ep_attr_t ea;
    struct sockaddr_in sin;
    ucp_ep_h ep;
    ucp_request_param_t p;
    uint16_t port;
    char buf[64];

    setup();
    memset(&sin, 0, sizeof(sin));
    sin.sin_family      = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sin.sin_port        = 0;
    memset(&lp, 0, sizeof(lp));
    lp.field_mask       = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                          UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr    = (struct sockaddr*)&sin;
    lp.sockaddr.addrlen = sizeof(sin);
    lp.conn_handler.cb  = conn_handler;
    lp.conn_handler.arg = &ctx;
    CHECK_OK(ucp_listener_create(worker, &lp, &listener));
    la.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    CHECK_OK(ucp_listener_query(listener, &la));
    port = ntohs(((struct sockaddr_in*)&la.sockaddr)->sin_port);
    CHECK(port != 0, "listener port");
    full_write(fd, &port, sizeof(port));

    /* first client: accept */
    while (requests < 1) {
        ucp_worker_progress(worker);
    }
    memset(&ep_params, 0, sizeof(ep_params));
    ep_params.field_mask   = UCP_EP_PARAM_FIELD_CONN_REQUEST;
    ep_params.conn_request = pending;
    CHECK_OK(ucp_ep_create(worker, &ep_params, &ep));
    ea.field_mask = UCP_EP_ATTR_FIELD_REMOTE_SOCKADDR;
    CHECK_OK(ucp_ep_query(ep, &ea));
    CHECK(ea.remote_sockaddr.ss_family == AF_INET, "peer address family");

    memset(&p, 0, sizeof(p));
    memset(buf, 0, sizeof(buf));
    CHECK_OK(wait_op(ucp_tag_recv_nbx(worker, buf, sizeof(buf), 1, (ucp_tag_t)-1, &p)));
    CHECK(verify(buf, sizeof(buf), 1) == 0, "client's message");
    fill(buf, sizeof(buf), 2);
    CHECK_OK(wait_op(ucp_tag_send_nbx(ep, buf, sizeof(buf), 2, &p)));

    /* second client: reject */
    while (requests < 2) {
        ucp_worker_progress(worker);
    }
    CHECK_OK(ucp_listener_reject(listener, pending));
    barrier(fd);

    ucp_listener_destroy(listener);
    barrier(fd);
    ucp_ep_destroy(ep);
    teardown();
    printf("[%d] client-server: server passed\n", (int)getpid());
    return 0;
}

static int client(int fd)
{
    ucp_ep_params_t ep_params;
    struct sockaddr_in sin;
    ucp_request_param_t p;
    ucp_ep_h ep, ep2;
    ucp_ep_attr_t ea;
    ucs_status_t st;
    uint16_t port;
    char buf[64];

    setup();
    full_read(fd, &port, sizeof(port));
    memset(&sin, 0, sizeof(sin));
    sin.sin_family      = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sin.sin_port        = htons(port);
    memset(&ep_params, 0, sizeof(ep_params));
    ep_params.field_mask       = UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_FLAGS;
    ep_params.flags            = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep_params.sockaddr.addr    = (struct sockaddr*)&sin;
    ep_params.sockaddr.addrlen = sizeof(sin);
    CHECK_OK(ucp_ep_create(worker, &ep_params, &ep));
    ea.field_mask = UCP_EP_ATTR_FIELD_REMOTE_SOCKADDR;
    CHECK_OK(ucp_ep_query(ep, &ea));
    CHECK(((struct sockaddr_in*)&ea.remote_sockaddr)->sin_port == htons(port), "peer port");

    memset(&p, 0, sizeof(p));
    fill(buf, sizeof(buf), 1);
    CHECK_OK(wait_op(ucp_tag_send_nbx(ep, buf, sizeof(buf), 1, &p)));
    memset(buf, 0, sizeof(buf));
    CHECK_OK(wait_op(ucp_tag_recv_nbx(worker, buf, sizeof(buf), 2, (ucp_tag_t)-1, &p)));
    CHECK(verify(buf, sizeof(buf), 2) == 0, "server's message");

    /* a second connection, which the server rejects: rucx reports it from
     * ucp_ep_create, UCX later through the endpoint's error handler */
    ep_params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                            UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep_params.err_mode       = UCP_ERR_HANDLING_MODE_PEER;
    ep_params.err_handler.cb = err_handler;
    st = ucp_ep_create(worker, &ep_params, &ep2);
    if (st == UCS_OK) {
        void *r;
        while (ep_failed == 0) {
            ucp_worker_progress(worker);
        }
        r = ucp_ep_close_nb(ep2, UCP_EP_CLOSE_MODE_FORCE);
        CHECK(!UCS_PTR_IS_ERR(r), "close");
        CHECK_OK(wait_op(r));
    } else {
        CHECK(st == UCS_ERR_REJECTED, "second connection: %s", ucs_status_string(st));
    }
    barrier(fd);
    barrier(fd);
    ucp_ep_destroy(ep);
    teardown();
    printf("[%d] client-server: client passed\n", (int)getpid());
    return 0;
}

int main(void)
{
    return run_pair(server, client);
}
