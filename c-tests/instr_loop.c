/* instr_loop: the C ABI's cost of one 8-byte tagged message, for instruction counting
 * (scripts/instr-count runs it under callgrind at two counts and takes the difference).
 *
 *   instr_loop N [WARMUP [posted|ompi]]
 *
 * One worker, one endpoint to that same worker (ucp picks its loopback transport). Each
 * iteration sends 8 bytes with ucp_tag_send_nbx, receives them with ucp_tag_recv_nbx,
 * and calls ucp_worker_progress until both requests are complete; the received value
 * and length are checked every time. With "posted", the receive goes first and both
 * calls name a callback and a datatype, as Open MPI's pml ucx does: the message then
 * meets a posted receive, and completion comes through the callbacks. With "ompi", the
 * calls are the ones Open MPI 4.1's pml ucx makes for a blocking MPI_Recv and MPI_Send
 * (seen by interposing on them): the receive goes first, with only a request of the
 * caller's memory (UCP_OP_ATTR_FIELD_REQUEST), the send with that field and
 * UCP_OP_ATTR_FLAG_FAST_CMPL, and the receive is waited for with ucp_worker_progress and
 * ucp_request_test; nothing is freed. WARMUP iterations (default 100) run first, so that
 * lazy set-up is not part of the difference between two counts.
 *
 * Exit status 0 when every message arrived intact, 1 otherwise. Built against the UCP
 * API only, so the same binary runs on UCX's libucp.so.0 and on rucx's. */
#include "common.h"

#define LOOP_TAG 0x5eedULL

/* Waits until `req` (a request pointer, NULL, or a status in a pointer) is complete and
 * returns its status; frees it. */
static ucs_status_t finish(ucp_worker_h worker, void *req)
{
    ucs_status_t st;

    if (req == NULL) {
        return UCS_OK;
    }
    if (UCS_PTR_IS_ERR(req)) {
        return UCS_PTR_STATUS(req);
    }
    while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) {
        ucp_worker_progress(worker);
    }
    ucp_request_free(req);
    return st;
}

/* One send of `value` and the receive that takes it; returns the value received. */
static uint64_t round_trip(ucp_worker_h worker, ucp_ep_h ep, uint64_t value)
{
    uint64_t out = value, in = ~value;
    ucp_request_param_t param;
    ucp_tag_recv_info_t info;
    void *sreq, *rreq;
    ucs_status_t st;

    memset(&param, 0, sizeof(param));
    sreq = ucp_tag_send_nbx(ep, &out, sizeof(out), LOOP_TAG, &param);
    CHECK(!UCS_PTR_IS_ERR(sreq), "send: %s", ucs_status_string(UCS_PTR_STATUS(sreq)));

    /* No receive information asked for: UCX 1.13 leaves it unset when the receive
     * completes in the call. A receive still in progress reports it through
     * ucp_tag_recv_request_test, and is checked then; the value is always checked. */
    memset(&param, 0, sizeof(param));
    rreq = ucp_tag_recv_nbx(worker, &in, sizeof(in), LOOP_TAG, ~0ULL, &param);
    CHECK(!UCS_PTR_IS_ERR(rreq), "recv: %s", ucs_status_string(UCS_PTR_STATUS(rreq)));
    if (rreq != NULL) {
        while ((st = ucp_tag_recv_request_test(rreq, &info)) == UCS_INPROGRESS) {
            ucp_worker_progress(worker);
        }
        CHECK_OK(st);
        ucp_request_free(rreq);
        CHECK(info.length == sizeof(in), "received %zu bytes", info.length);
        CHECK(info.sender_tag == LOOP_TAG, "tag %#llx",
              (unsigned long long)info.sender_tag);
    }
    CHECK_OK(finish(worker, sreq));
    return in;
}

/* Bytes of request memory ucp needs before a request of the caller's (ompi mode). */
static size_t request_size;

/* One message to a receive posted before it, both with requests in the caller's memory,
 * as Open MPI's blocking receive and send; returns the value received. */
static uint64_t ompi_round(ucp_worker_h worker, ucp_ep_h ep, uint64_t value)
{
    static _Alignas(64) unsigned char rmem[1024], smem[1024];
    uint64_t out = value, in = ~value;
    ucp_request_param_t rp, sp;
    ucp_tag_recv_info_t info;
    ucs_status_t st;
    void *rreq, *sreq;

    memset(&rp, 0, sizeof(rp));
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_REQUEST;
    rp.request      = rmem + request_size;
    rreq = ucp_tag_recv_nbx(worker, &in, sizeof(in), LOOP_TAG, ~0ULL, &rp);
    CHECK(!UCS_PTR_IS_ERR(rreq), "recv: %s", ucs_status_string(UCS_PTR_STATUS(rreq)));
    memset(&sp, 0, sizeof(sp));
    sp.op_attr_mask = UCP_OP_ATTR_FIELD_REQUEST | UCP_OP_ATTR_FLAG_FAST_CMPL;
    sp.request      = smem + request_size;
    sreq = ucp_tag_send_nbx(ep, &out, sizeof(out), LOOP_TAG, &sp);
    CHECK(!UCS_PTR_IS_ERR(sreq), "send: %s", ucs_status_string(UCS_PTR_STATUS(sreq)));
    if (sreq != NULL) {
        while ((st = ucp_request_check_status(sreq)) == UCS_INPROGRESS) {
            ucp_worker_progress(worker);
        }
        CHECK_OK(st);
    }
    CHECK(rreq != NULL, "the receive completed before its message was sent");
    while ((st = ucp_request_test(rreq, &info)) == UCS_INPROGRESS) {
        ucp_worker_progress(worker);
    }
    CHECK_OK(st);
    CHECK(info.length == sizeof(in) && info.sender_tag == LOOP_TAG,
          "receive information: %zu bytes, tag %#llx", info.length,
          (unsigned long long)info.sender_tag);
    return in;
}

static int callbacks;
static ucp_tag_recv_info_t posted_info;

static void posted_send_cb(void *req, ucs_status_t status, void *user_data)
{
    CHECK_OK(status);
    (*(int*)user_data)++;
    (void)req;
}

static void posted_recv_cb(void *req, ucs_status_t status, const ucp_tag_recv_info_t *info,
                           void *user_data)
{
    CHECK_OK(status);
    posted_info = *info;
    (*(int*)user_data)++;
    (void)req;
}

/* One message to a receive posted before it, both with callbacks; returns the value. */
static uint64_t posted_round(ucp_worker_h worker, ucp_ep_h ep, uint64_t value)
{
    uint64_t out = value, in = ~value;
    ucp_request_param_t sp, rp;
    void *sreq, *rreq;
    int want;

    memset(&rp, 0, sizeof(rp));
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_DATATYPE |
                      UCP_OP_ATTR_FIELD_USER_DATA;
    rp.cb.recv      = posted_recv_cb;
    rp.datatype     = ucp_dt_make_contig(1);
    rp.user_data    = &callbacks;
    sp              = rp;
    sp.cb.send      = posted_send_cb;
    callbacks = 0;
    posted_info.length = 0;
    rreq = ucp_tag_recv_nbx(worker, &in, sizeof(in), LOOP_TAG, ~0ULL, &rp);
    CHECK(rreq != NULL && !UCS_PTR_IS_ERR(rreq), "posted receive");
    sreq = ucp_tag_send_nbx(ep, &out, sizeof(out), LOOP_TAG, &sp);
    CHECK(!UCS_PTR_IS_ERR(sreq), "send: %s", ucs_status_string(UCS_PTR_STATUS(sreq)));
    want = 1 + (sreq != NULL);
    while (callbacks < want) {
        ucp_worker_progress(worker);
    }
    CHECK(posted_info.length == sizeof(in) && posted_info.sender_tag == LOOP_TAG,
          "receive information: %zu bytes", posted_info.length);
    ucp_request_free(rreq);
    if (sreq != NULL) {
        ucp_request_free(sreq);
    }
    return in;
}

int main(int argc, char **argv)
{
    ucp_params_t params;
    ucp_worker_params_t wparams;
    ucp_ep_params_t eparams;
    ucp_context_h context;
    ucp_worker_h worker;
    ucp_address_t *address;
    size_t address_len;
    ucp_ep_h ep;
    unsigned long n, warmup = 100, i;
    char *end;

    if (argc < 2 || argc > 4 ||
        (argc == 4 && strcmp(argv[3], "posted") != 0 && strcmp(argv[3], "ompi") != 0)) {
        fprintf(stderr, "usage: %s ITERATIONS [WARMUP [posted|ompi]]\n", argv[0]);
        return 2;
    }
    n = strtoul(argv[1], &end, 10);
    if (*end != '\0' || n == 0) {
        fprintf(stderr, "%s: bad iteration count '%s'\n", argv[0], argv[1]);
        return 2;
    }
    int posted = argc == 4 && strcmp(argv[3], "posted") == 0;
    int ompi = argc == 4 && strcmp(argv[3], "ompi") == 0;
    if (argc >= 3) {
        warmup = strtoul(argv[2], &end, 10);
        if (*end != '\0') {
            fprintf(stderr, "%s: bad warm-up count '%s'\n", argv[0], argv[2]);
            return 2;
        }
    }

    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG;
    CHECK_OK(ucp_init(&params, NULL, &context));
    {
        ucp_context_attr_t attr;
        memset(&attr, 0, sizeof(attr));
        attr.field_mask = UCP_ATTR_FIELD_REQUEST_SIZE;
        CHECK_OK(ucp_context_query(context, &attr));
        request_size = attr.request_size;
        CHECK(request_size <= 1024 - 64, "request size %zu", request_size);
    }

    memset(&wparams, 0, sizeof(wparams));
    wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    CHECK_OK(ucp_worker_create(context, &wparams, &worker));

    CHECK_OK(ucp_worker_get_address(worker, &address, &address_len));
    memset(&eparams, 0, sizeof(eparams));
    eparams.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    eparams.address = address;
    CHECK_OK(ucp_ep_create(worker, &eparams, &ep));
    ucp_worker_release_address(worker, address);

    for (i = 0; i < warmup + n; i++) {
        uint64_t v = 0x1000 + i;
        uint64_t got = ompi     ? ompi_round(worker, ep, v)
                       : posted ? posted_round(worker, ep, v)
                                : round_trip(worker, ep, v);
        CHECK(got == v, "iteration %lu received %#llx, expected %#llx", i,
              (unsigned long long)got, (unsigned long long)v);
    }

    {
        /* An endpoint to its own worker has nobody to say goodbye to: close it at once.
         * The status is not checked (UCX versions differ on force-closing it). */
        ucp_request_param_t cp;
        memset(&cp, 0, sizeof(cp));
        cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
        (void)finish(worker, ucp_ep_close_nbx(ep, &cp));
    }
    ucp_worker_destroy(worker);
    ucp_cleanup(context);
    printf("instr_loop: %lu iterations (+%lu warm-up) of 8-byte tag send+recv%s: ok\n", n,
           warmup,
           ompi ? " (Open MPI's calls)" : posted ? " (posted receive, callbacks)" : "");
    return 0;
}
