/* Tag-matching ping-pong between two processes over the UCP C API: nbx sends and
 * receives with callbacks and a request area of the application's (request_init must
 * have run on it), the older _nb calls, requests of the caller's own memory (as Open MPI
 * uses them), probe and message receive, synchronous sends, wildcard masks, truncation,
 * cancel, and an I/O-vector datatype; sizes from 0 bytes to 4 MiB, data checked. */
#include "common.h"
#include <alloca.h>

#define REQ_MAGIC 0x5eed

typedef struct {
    int magic;     /* set by request_init */
    int completed; /* set by the callbacks */
    ucs_status_t status;
    size_t length;
    ucp_tag_t tag;
} app_req_t;

static ucp_context_h ctx;
static ucp_worker_h worker;
static ucp_ep_h ep;
static size_t req_size;
static int inits;

static void req_init(void *r)
{
    app_req_t *a = r;
    a->magic     = REQ_MAGIC;
    a->completed = 0;
    inits++;
}

static void send_cb(void *r, ucs_status_t status, void *user_data)
{
    app_req_t *a = r;
    CHECK(a->magic == REQ_MAGIC, "request_init did not run on the request area");
    a->completed = 1;
    a->status    = status;
    CHECK(user_data == (void*)&ctx, "user_data not passed");
}

static void recv_cb(void *r, ucs_status_t status, const ucp_tag_recv_info_t *info,
                    void *user_data)
{
    app_req_t *a = r;
    CHECK(a->magic == REQ_MAGIC, "request_init did not run on the request area");
    a->completed = 1;
    a->status    = status;
    a->length    = info->length;
    a->tag       = info->sender_tag;
    (void)user_data;
}

static void old_send_cb(void *r, ucs_status_t status)
{
    app_req_t *a = r;
    a->completed = 1;
    a->status    = status;
}

static void old_recv_cb(void *r, ucs_status_t status, ucp_tag_recv_info_t *info)
{
    app_req_t *a = r;
    a->completed = 1;
    a->status    = status;
    a->length    = info->length;
    a->tag       = info->sender_tag;
}

/* Waits for a request; checks its callback ran; returns its status and frees it. */
static ucs_status_t wait_req(void *r, app_req_t *out)
{
    ucs_status_t st;
    app_req_t *a;
    if (r == NULL) {
        return UCS_OK;
    }
    CHECK(!UCS_PTR_IS_ERR(r), "operation failed: %s", ucs_status_string(UCS_PTR_STATUS(r)));
    while ((st = ucp_request_check_status(r)) == UCS_INPROGRESS) {
        ucp_worker_progress(worker);
    }
    a = r;
    CHECK(a->completed == 1, "callback did not run before completion was reported");
    CHECK(a->status == st, "callback status %d != request status %d", a->status, st);
    if (out != NULL) {
        *out = *a;
    }
    a->completed = 0; /* the application resets its fields before freeing */
    ucp_request_free(r);
    return st;
}

static void setup(int fd)
{
    ucp_params_t params;
    ucp_worker_params_t wparams;
    ucp_context_attr_t cattr;
    ucp_ep_params_t eparams;
    ucp_address_t *addr;
    size_t addr_len;
    void *peer;

    memset(&params, 0, sizeof(params));
    params.field_mask   = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_REQUEST_SIZE |
                          UCP_PARAM_FIELD_REQUEST_INIT;
    params.features     = UCP_FEATURE_TAG;
    params.request_size = sizeof(app_req_t);
    params.request_init = req_init;
    CHECK_OK(ucp_init(&params, NULL, &ctx));

    cattr.field_mask = UCP_ATTR_FIELD_REQUEST_SIZE;
    CHECK_OK(ucp_context_query(ctx, &cattr));
    req_size = cattr.request_size;
    CHECK(req_size >= 16 && req_size < 4096, "request size %zu", req_size);

    memset(&wparams, 0, sizeof(wparams));
    wparams.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    CHECK_OK(ucp_worker_create(ctx, &wparams, &worker));
    CHECK_OK(ucp_worker_get_address(worker, &addr, &addr_len));
    peer = exchange(fd, addr, addr_len, NULL);
    ucp_worker_release_address(worker, addr);

    memset(&eparams, 0, sizeof(eparams));
    eparams.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    eparams.address    = peer;
    CHECK_OK(ucp_ep_create(worker, &eparams, &ep));
    free(peer);
}

static void teardown(int fd)
{
    ucp_request_param_t p;
    void *r;
    barrier(fd);
    memset(&p, 0, sizeof(p));
    r = ucp_worker_flush_nbx(worker, &p);
    CHECK_OK(wait_req(r, NULL) == UCS_OK ? UCS_OK : UCS_ERR_IO_ERROR);
    barrier(fd);
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags        = 0; /* flush, then close (UCX forces only in error-handling mode) */
    r = ucp_ep_close_nbx(ep, &p);
    if (UCS_PTR_IS_PTR(r)) {
        while (ucp_request_check_status(r) == UCS_INPROGRESS) {
            ucp_worker_progress(worker);
        }
        ucp_request_free(r);
    } else {
        CHECK_OK(UCS_PTR_STATUS(r));
    }
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
}

static void *send_nbx(const void *buf, size_t len, ucp_tag_t tag, int sync)
{
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send      = send_cb;
    p.user_data    = &ctx;
    return sync ? ucp_tag_send_sync_nbx(ep, buf, len, tag, &p) :
                  ucp_tag_send_nbx(ep, buf, len, tag, &p);
}

static void *recv_nbx(void *buf, size_t len, ucp_tag_t tag, ucp_tag_t mask,
                      ucp_tag_recv_info_t *imm)
{
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    p.op_attr_mask     = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_RECV_INFO;
    p.cb.recv          = recv_cb;
    p.recv_info.tag_info = imm;
    return ucp_tag_recv_nbx(worker, buf, len, tag, mask, &p);
}

/* UCX 1.13 itself does not fill recv_info when a receive completes in the call (its
 * documentation says it does, rucx does): with RUCX_EXPECT_UCX set, accept that. */
static int imm_info_missing(const ucp_tag_recv_info_t *info)
{
    int missing = info->length == (size_t)-1;
    CHECK(!missing || getenv("RUCX_EXPECT_UCX") != NULL,
          "recv_info not filled on immediate completion");
    return missing;
}

/* Receives len bytes with tag; checks length, tag and data. */
static void recv_check(void *buf, size_t len, ucp_tag_t tag, unsigned seed)
{
    ucp_tag_recv_info_t imm = {(ucp_tag_t)-1, (size_t)-1};
    app_req_t a;
    void *r;
    size_t bad;
    memset(buf, 0xee, len);
    r = recv_nbx(buf, len, tag, (ucp_tag_t)-1, &imm);
    if (r == NULL) {
        a.length = imm_info_missing(&imm) ? len : imm.length;
        a.tag    = imm_info_missing(&imm) ? tag : imm.sender_tag;
    } else {
        CHECK(wait_req(r, &a) == UCS_OK, "receive failed");
    }
    CHECK(a.length == len, "length %zu != %zu", a.length, len);
    CHECK(a.tag == tag, "tag %llx != %llx", (unsigned long long)a.tag, (unsigned long long)tag);
    bad = verify(buf, len, seed);
    CHECK(bad == 0, "data differs at byte %zu of %zu", bad - 1, len);
}

static const size_t sizes[] = {0, 1, 8, 100, 1024, 4096, 8192, 65536, 200000, 1 << 20, 4 << 20};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static int side(int fd, int rank)
{
    size_t max = 4 << 20, i;
    char *buf = malloc(max + 64), *buf2 = malloc(max + 64);
    ucp_tag_recv_info_t info;
    app_req_t a;
    void *r;
    int iter;

    setup(fd);

    /* 1. ping-pong over all sizes with nbx and callbacks */
    for (i = 0; i < NSIZES; i++) {
        for (iter = 0; iter < 3; iter++) {
            unsigned seed = (unsigned)(i * 10 + iter);
            ucp_tag_t tag = 0x100 + i;
            if (rank == 0) {
                fill(buf, sizes[i], seed);
                CHECK(wait_req(send_nbx(buf, sizes[i], tag, 0), NULL) == UCS_OK, "send");
                recv_check(buf2, sizes[i], tag | (1ull << 40), seed + 7);
            } else {
                recv_check(buf2, sizes[i], tag, seed);
                fill(buf, sizes[i], seed + 7);
                CHECK(wait_req(send_nbx(buf, sizes[i], tag | (1ull << 40), 0), NULL) == UCS_OK,
                      "send");
            }
        }
    }
    CHECK(inits > 0, "request_init never ran");

    /* 2. requests in the caller's memory (UCP_OP_ATTR_FIELD_REQUEST), completion by
     *    ucp_request_test, the way Open MPI's blocking calls use them */
    for (i = 0; i < NSIZES; i++) {
        void *req = (char*)alloca(req_size + sizeof(app_req_t)) + req_size;
        ucp_request_param_t p;
        ucs_status_t st;
        memset(&p, 0, sizeof(p));
        p.op_attr_mask = UCP_OP_ATTR_FIELD_REQUEST;
        p.request      = req;
        if (rank == 0) {
            fill(buf, sizes[i], 99);
            r = ucp_tag_send_nbx(ep, buf, sizes[i], 77, &p);
            CHECK(!UCS_PTR_IS_ERR(r), "send");
            if (r != NULL) {
                CHECK(r == req, "a request other than the caller's was returned");
                while (ucp_request_check_status(req) == UCS_INPROGRESS) {
                    ucp_worker_progress(worker);
                }
            }
        } else {
            memset(buf2, 0, sizes[i]);
            (void)ucp_tag_recv_nbx(worker, buf2, sizes[i], 77, (ucp_tag_t)-1, &p);
            while ((st = ucp_request_test(req, &info)) == UCS_INPROGRESS) {
                ucp_worker_progress(worker);
            }
            CHECK_OK(st);
            CHECK(info.length == sizes[i], "length %zu", info.length);
            CHECK(verify(buf2, sizes[i], 99) == 0, "data");
        }
    }

    /* 3. the older _nb interface: receive posted before and after the send */
    barrier(fd);
    if (rank == 0) {
        fill(buf, 5000, 5);
        r = ucp_tag_send_nb(ep, buf, 5000, ucp_dt_make_contig(1), 555, old_send_cb);
        CHECK(wait_req(r, NULL) == UCS_OK, "send_nb");
        fill(buf, 64, 6);
        r = ucp_tag_send_nb(ep, buf, 16, ucp_dt_make_contig(4), 556, old_send_cb);
        CHECK(wait_req(r, NULL) == UCS_OK, "send_nb contig(4)");
    } else {
        r = ucp_tag_recv_nb(worker, buf2, 5000, ucp_dt_make_contig(1), 555, (ucp_tag_t)-1,
                            old_recv_cb);
        CHECK(UCS_PTR_IS_PTR(r), "recv_nb must return a request");
        CHECK(wait_req(r, &a) == UCS_OK && a.length == 5000 && a.tag == 555, "recv_nb");
        CHECK(verify(buf2, 5000, 5) == 0, "data");
        barrier(fd); /* the message is now unexpected when the receive is posted */
        r = ucp_tag_recv_nb(worker, buf2, 16, ucp_dt_make_contig(4), 556, (ucp_tag_t)-1,
                            old_recv_cb);
        CHECK(UCS_PTR_IS_PTR(r), "recv_nb must return a request even when complete");
        CHECK(wait_req(r, &a) == UCS_OK && a.length == 64, "recv_nb unexpected (len %zu)",
              a.length);
        CHECK(verify(buf2, 64, 6) == 0, "data");
    }
    if (rank == 0) {
        barrier(fd);
    }

    /* 4. probe + message receive, wildcard mask, sync send */
    barrier(fd);
    if (rank == 0) {
        fill(buf, 300000, 8);
        r = send_nbx(buf, 300000, 0xabc0001, 1);
        fill(buf2, 1000, 9);
        CHECK(wait_req(send_nbx(buf2, 1000, 0xabc0002, 0), NULL) == UCS_OK, "send");
        CHECK(wait_req(r, NULL) == UCS_OK, "sync send");
    } else {
        ucp_tag_message_h msg;
        ucp_request_param_t p;
        /* wait for both messages */
        do {
            ucp_worker_progress(worker);
            msg = ucp_tag_probe_nb(worker, 0xabc0002, (ucp_tag_t)-1, 0, &info);
        } while (msg == NULL);
        CHECK(info.length == 1000, "probe length %zu", info.length);
        do {
            ucp_worker_progress(worker);
            msg = ucp_tag_probe_nb(worker, 0xabc0000, 0xffff0000ull, 1, &info);
        } while (msg == NULL);
        CHECK(info.sender_tag == 0xabc0001 && info.length == 300000, "probe (tag %llx len %zu)",
              (unsigned long long)info.sender_tag, info.length);
        memset(&p, 0, sizeof(p));
        p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK;
        p.cb.recv      = recv_cb;
        r = ucp_tag_msg_recv_nbx(worker, buf2, 300000, msg, &p);
        CHECK(wait_req(r, &a) == UCS_OK && a.length == 300000, "msg recv (status %d len %zu)",
              a.status, a.length);
        CHECK(verify(buf2, 300000, 8) == 0, "data");
        info.length = (size_t)-1;
        r = recv_nbx(buf2, 1000, 0, 0, &info); /* any tag */
        if (r != NULL) {
            CHECK(wait_req(r, &a) == UCS_OK, "recv");
            info.length = a.length;
        } else if (imm_info_missing(&info)) {
            info.length = 1000;
        }
        CHECK(info.length == 1000 && verify(buf2, 1000, 9) == 0, "wildcard receive");
    }

    /* 5. truncation and cancel */
    barrier(fd);
    if (rank == 0) {
        fill(buf, 4000, 11);
        CHECK(wait_req(send_nbx(buf, 4000, 999, 0), NULL) == UCS_OK, "send");
    } else {
        ucs_status_t st;
        r = recv_nbx(buf2, 100, 999, (ucp_tag_t)-1, &info);
        if (r == NULL) {
            CHECK(0, "truncated receive reported success");
        } else if (UCS_PTR_IS_ERR(r)) {
            st = UCS_PTR_STATUS(r);
        } else {
            st = wait_req(r, &a);
        }
        CHECK(st == UCS_ERR_MESSAGE_TRUNCATED, "status %d", st);
        r = recv_nbx(buf2, 100, 12345, (ucp_tag_t)-1, &info);
        CHECK(UCS_PTR_IS_PTR(r), "receive of a message that never comes");
        ucp_request_cancel(worker, r);
        CHECK(wait_req(r, &a) == UCS_ERR_CANCELED, "cancel (status %d)", a.status);
    }

    /* 6. I/O vector datatype (sender gathers, receiver scatters) */
    barrier(fd);
    {
        ucp_dt_iov_t iov[3] = {{buf, 10}, {buf + 100, 70000}, {buf + 80000, 5}};
        ucp_request_param_t p;
        memset(&p, 0, sizeof(p));
        p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA;
        p.datatype     = ucp_dt_make_iov();
        p.user_data    = &ctx;
        if (rank == 0) {
            fill(buf2, 70015, 12);
            memcpy(iov[0].buffer, buf2, 10);
            memcpy(iov[1].buffer, buf2 + 10, 70000);
            memcpy(iov[2].buffer, buf2 + 70010, 5);
            p.cb.send = send_cb;
            CHECK(wait_req(ucp_tag_send_nbx(ep, iov, 3, 4242, &p), NULL) == UCS_OK, "iov send");
        } else {
            p.cb.recv = recv_cb;
            r = ucp_tag_recv_nbx(worker, iov, 3, 4242, (ucp_tag_t)-1, &p);
            if (r != NULL) {
                CHECK(wait_req(r, &a) == UCS_OK && a.length == 70015, "iov recv");
            }
            memcpy(buf2, iov[0].buffer, 10);
            memcpy(buf2 + 10, iov[1].buffer, 70000);
            memcpy(buf2 + 70010, iov[2].buffer, 5);
            CHECK(verify(buf2, 70015, 12) == 0, "iov data");
        }
    }

    teardown(fd);
    free(buf);
    free(buf2);
    printf("[%d] tag test passed (rank %d)\n", (int)getpid(), rank);
    return 0;
}

static int parent(int fd) { return side(fd, 0); }
static int child(int fd) { return side(fd, 1); }

int main(void)
{
    return run_pair(parent, child);
}
