/* One process, an endpoint to its own worker: the UCP calls UCX 1.13 programs expect that
 * are not exercised elsewhere.
 *  - ucp_request_alloc: an empty request, used as request memory by several operations
 *    (UCP_OP_ATTR_FIELD_REQUEST) one after the other, then freed;
 *  - ucp_stream_worker_poll: lists the endpoint (with its user data) once stream bytes
 *    are there, and no endpoint once they are read;
 *  - ucp_ep_modify_nb: user data and error handler change; a new peer address is
 *    UCS_ERR_NOT_IMPLEMENTED, as in UCX;
 *  - ucp_ep_query: the name; socket addresses of an endpoint not made through a
 *    listener are UCS_ERR_NOT_CONNECTED;
 *  - requests in the caller's memory, as Open MPI's pml ucx uses them for a blocking
 *    MPI_Recv and MPI_Send: the receive posted before its message (it waits, and
 *    ucp_request_test reports it) and after it (taken in the call: NULL, and the memory
 *    reads as completed all the same), with and without a callback (which runs once for
 *    a receive that waited, never for one taken in the call); the send with
 *    UCP_OP_ATTR_FLAG_FAST_CMPL.
 * Every byte received is checked. */
#include "common.h"

static int cb_calls;
/* Progresses until `req` (request memory of ours, possibly from ucp_request_alloc) is no
 * longer in progress; returns its status. */
static ucs_status_t wait_user(ucp_worker_h worker, void *req)
{
    ucs_status_t s;
    int spins = 0;
    while ((s = ucp_request_check_status(req)) == UCS_INPROGRESS) {
        ucp_worker_progress(worker);
        CHECK(++spins < 10000000, "request never completed");
    }
    return s;
}

static int recv_calls;

static void user_recv_cb(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                         void *user_data)
{
    (void)request;
    CHECK(status == UCS_OK && info->length == 200, "receive callback: status %d, %zu bytes",
          (int)status, info->length);
    (*(int *)user_data)++;
}

/* One round of Open MPI's blocking calls with requests in the caller's memory (`rreq`,
 * `sreq`): the receive first when `recv_first`, a receive callback when `with_cb`. */
static void caller_memory_round(ucp_worker_h worker, ucp_ep_h ep, void *rreq, void *sreq,
                                int round, int recv_first, int with_cb)
{
    char sbuf[200], rbuf[256];
    ucp_request_param_t rp, sp;
    ucp_tag_recv_info_t info;
    ucp_tag_t tag = 0x4d5049ull + (ucp_tag_t)round;
    ucs_status_t st;
    void *r = NULL, *s;
    int spins = 0;

    fill(sbuf, sizeof(sbuf), 60 + round);
    memset(rbuf, 0, sizeof(rbuf));
    memset(&rp, 0, sizeof(rp));
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_REQUEST;
    rp.request = rreq;
    if (with_cb) {
        rp.op_attr_mask |= UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        rp.cb.recv = user_recv_cb;
        rp.user_data = &recv_calls;
    }
    memset(&sp, 0, sizeof(sp));
    sp.op_attr_mask = UCP_OP_ATTR_FIELD_REQUEST | UCP_OP_ATTR_FLAG_FAST_CMPL;
    sp.request = sreq;
    recv_calls = 0;
    if (recv_first) {
        r = ucp_tag_recv_nbx(worker, rbuf, sizeof(rbuf), tag, (ucp_tag_t)-1, &rp);
        CHECK(r == rreq, "round %d: a receive posted first returned %p, not its request", round,
              r);
    }
    s = ucp_tag_send_nbx(ep, sbuf, sizeof(sbuf), tag, &sp);
    CHECK(!UCS_PTR_IS_ERR(s), "round %d send: %s", round, ucs_status_string(UCS_PTR_STATUS(s)));
    if (s != NULL) {
        CHECK(s == sreq, "round %d: the send returned %p, not its request", round, s);
        CHECK_OK(wait_user(worker, sreq));
    }
    if (!recv_first) {
        /* The message is here (self) or on its way (tcp). */
        r = ucp_tag_recv_nbx(worker, rbuf, sizeof(rbuf), tag, (ucp_tag_t)-1, &rp);
        CHECK(r == NULL || r == rreq, "round %d: the receive returned %p", round, r);
        if (r == NULL) {
            CHECK(ucp_request_test(rreq, &info) == UCS_OK,
                  "round %d: a receive taken in the call does not read as completed", round);
        }
    }
    while ((st = ucp_request_test(rreq, &info)) == UCS_INPROGRESS) {
        ucp_worker_progress(worker);
        CHECK(++spins < 10000000, "round %d: the receive never completed", round);
    }
    CHECK_OK(st);
    CHECK(info.length == sizeof(sbuf) && info.sender_tag == tag, "round %d: %zu bytes, tag %#llx",
          round, info.length, (unsigned long long)info.sender_tag);
    CHECK(verify(rbuf, sizeof(sbuf), 60 + round) == 0, "round %d data", round);
    CHECK(rbuf[sizeof(sbuf)] == 0, "round %d: a byte past the message was written", round);
    CHECK(recv_calls == (with_cb && r != NULL), "round %d: %d receive callbacks", round,
          recv_calls);
}

static void send_cb(void *request, ucs_status_t status, void *user_data)
{
    (void)request;
    (void)user_data;
    CHECK(status == UCS_OK, "send status %d", (int)status);
    cb_calls++;
}

static void err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)arg;
    (void)ep;
    (void)status;
}

int main(void)
{
    ucp_params_t params;
    ucp_worker_params_t wparams;
    ucp_ep_params_t eparams;
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_ep_h ep;
    ucp_address_t *addr;
    size_t addr_len, len;
    ucp_request_param_t p;
    ucp_stream_poll_ep_t polled[4];
    ucp_ep_attr_t attr;
    char sbuf[300], rbuf[300];
    void *req, *r;
    ssize_t n;
    int round, spins, marker = 7, other = 8;

    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_STREAM;
    CHECK_OK(ucp_init(&params, NULL, &ctx));
    memset(&wparams, 0, sizeof(wparams));
    wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    CHECK_OK(ucp_worker_create(ctx, &wparams, &worker));
    printf("library: %s\n", ucp_get_version_string());
    CHECK_OK(ucp_worker_get_address(worker, &addr, &addr_len));
    memset(&eparams, 0, sizeof(eparams));
    eparams.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_USER_DATA |
                         UCP_EP_PARAM_FIELD_NAME;
    eparams.address = addr;
    eparams.user_data = &marker;
    eparams.name = "extras-ep";
    CHECK_OK(ucp_ep_create(worker, &eparams, &ep));

    /* ucp_ep_query */
    memset(&attr, 0, sizeof(attr));
    attr.field_mask = UCP_EP_ATTR_FIELD_NAME;
    CHECK_OK(ucp_ep_query(ep, &attr));
    CHECK(strcmp(attr.name, "extras-ep") == 0, "name '%s'", attr.name);
    attr.field_mask = UCP_EP_ATTR_FIELD_LOCAL_SOCKADDR;
    CHECK(ucp_ep_query(ep, &attr) == UCS_ERR_NOT_CONNECTED, "local sockaddr of a plain ep");

    /* ucp_request_alloc: one request, three receives in turn. */
    req = ucp_request_alloc(worker);
    CHECK(req != NULL, "ucp_request_alloc");
    CHECK(ucp_request_check_status(req) == UCS_OK, "a fresh request reads as completed");
    for (round = 0; round < 3; round++) {
        fill(sbuf, sizeof(sbuf), 11 + round);
        memset(rbuf, 0, sizeof(rbuf));
        memset(&p, 0, sizeof(p));
        p.op_attr_mask = UCP_OP_ATTR_FIELD_REQUEST;
        p.request = req;
        r = ucp_tag_recv_nbx(worker, rbuf, sizeof(rbuf), 40 + round, (ucp_tag_t)-1, &p);
        CHECK(!UCS_PTR_IS_ERR(r), "recv: %s", ucs_status_string(UCS_PTR_STATUS(r)));
        memset(&p, 0, sizeof(p));
        p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK;
        p.cb.send = send_cb;
        r = ucp_tag_send_nbx(ep, sbuf, sizeof(sbuf), 40 + round, &p);
        CHECK(!UCS_PTR_IS_ERR(r), "send: %s", ucs_status_string(UCS_PTR_STATUS(r)));
        CHECK_OK(wait_user(worker, req));
        CHECK_OK(wait_and_free(worker, r));
        CHECK(verify(rbuf, sizeof(rbuf), 11 + round) == 0, "round %d data", round);
    }
    ucp_request_free(req);

    /* Requests in the caller's memory, as Open MPI's blocking calls. */
    {
        ucp_context_attr_t cattr;
        char *rmem, *smem;
        memset(&cattr, 0, sizeof(cattr));
        cattr.field_mask = UCP_ATTR_FIELD_REQUEST_SIZE;
        CHECK_OK(ucp_context_query(ctx, &cattr));
        rmem = malloc(cattr.request_size + 64);
        smem = malloc(cattr.request_size + 64);
        CHECK(rmem != NULL && smem != NULL, "request memory");
        for (round = 0; round < 8; round++) {
            caller_memory_round(worker, ep, rmem + cattr.request_size,
                                smem + cattr.request_size, round, round % 2 == 0,
                                (round / 2) % 2 == 1);
        }
        free(rmem);
        free(smem);
    }

    /* ucp_stream_worker_poll */
    n = ucp_stream_worker_poll(worker, polled, 4, 0);
    CHECK(n == 0, "no stream data yet, %zd endpoints", n);
    fill(sbuf, 100, 5);
    memset(&p, 0, sizeof(p));
    r = ucp_stream_send_nbx(ep, sbuf, 100, &p);
    CHECK_OK(wait_and_free(worker, r));
    spins = 0;
    do {
        ucp_worker_progress(worker);
        n = ucp_stream_worker_poll(worker, polled, 4, 0);
        CHECK(++spins < 1000000, "stream data never listed");
    } while (n == 0);
    CHECK(n == 1, "%zd endpoints listed", n);
    CHECK(polled[0].ep == ep, "the endpoint listed");
    CHECK(polled[0].user_data == &marker, "its user data");
    memset(rbuf, 0, sizeof(rbuf));
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_STREAM_RECV_FLAG_WAITALL;
    len = 0;
    r = ucp_stream_recv_nbx(ep, rbuf, 100, &len, &p);
    if (r != NULL) {
        CHECK(!UCS_PTR_IS_ERR(r), "stream recv");
        CHECK_OK(wait_and_free(worker, r));
    } else {
        CHECK(len == 100, "stream length %zu", len);
    }
    CHECK(verify(rbuf, 100, 5) == 0, "stream data");
    n = ucp_stream_worker_poll(worker, polled, 4, 0);
    CHECK(n == 0, "stream data read, still %zd listed", n);

    /* ucp_ep_modify_nb: new user data (seen by the next poll) and an error handler. */
    memset(&eparams, 0, sizeof(eparams));
    eparams.field_mask = UCP_EP_PARAM_FIELD_USER_DATA | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    eparams.err_handler.cb = err_cb;
    eparams.err_handler.arg = NULL;
    eparams.user_data = &other;
    r = ucp_ep_modify_nb(ep, &eparams);
    CHECK(r == NULL, "modify: %s", ucs_status_string(UCS_PTR_STATUS(r)));
    memset(&p, 0, sizeof(p));
    r = ucp_stream_send_nbx(ep, sbuf, 1, &p);
    CHECK_OK(wait_and_free(worker, r));
    spins = 0;
    do {
        ucp_worker_progress(worker);
        n = ucp_stream_worker_poll(worker, polled, 4, 0);
        CHECK(++spins < 1000000, "stream data never listed");
    } while (n == 0);
    CHECK(polled[0].user_data == &other, "the modified user data");
    r = ucp_stream_recv_nbx(ep, rbuf, 1, &len, &p);
    if (r != NULL) {
        CHECK_OK(wait_and_free(worker, r));
    }
    eparams.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    eparams.address = addr;
    r = ucp_ep_modify_nb(ep, &eparams);
    CHECK(UCS_PTR_IS_ERR(r) && UCS_PTR_STATUS(r) == UCS_ERR_NOT_IMPLEMENTED,
          "modify of the peer address");

    CHECK(cb_calls <= 3, "%d send callbacks", cb_calls);
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    r = ucp_ep_close_nbx(ep, &p);
    CHECK_OK(wait_and_free(worker, r));
    ucp_worker_release_address(worker, addr);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    printf("extras test passed\n");
    return 0;
}
