/* Streams between two processes: ordered bytes per endpoint, sent with
 * ucp_stream_send_nbx / _nb, received exactly (UCP_STREAM_RECV_FLAG_WAITALL), partially
 * (whatever is there), and into library buffers (ucp_stream_recv_data_nb). */
#include "common.h"

static ucp_context_h ctx;
static ucp_worker_h worker;
static ucp_ep_h ep;

/* UCX calls the callback of an _nb operation unconditionally: pass one. */
static void send_cb(void *req, ucs_status_t status)
{
    (void)req;
    (void)status;
}

static void recv_cb(void *req, ucs_status_t status, size_t length)
{
    (void)req;
    (void)status;
    (void)length;
}

static void setup(int fd)
{
    connect_peer(fd, UCP_FEATURE_STREAM, &ctx, &worker, &ep);
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
    return st;
}

static void teardown(int fd)
{
    barrier(fd);
    ucp_ep_destroy(ep);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
}

enum { TOTAL = 3 * 1000000 + 777 };

static int sender(int fd)
{
    char *buf = malloc(TOTAL);
    ucp_request_param_t p;
    void *r;
    setup(fd);
    fill(buf, TOTAL, 50);
    memset(&p, 0, sizeof(p));
    /* the stream is one byte sequence whatever the pieces it is sent in */
    r = ucp_stream_send_nbx(ep, buf, 777, &p);
    CHECK_OK(wait_op(r));
    if (r != NULL) ucp_request_free(r);
    r = ucp_stream_send_nb(ep, buf + 777, 1000000, ucp_dt_make_contig(1), send_cb, 0);
    CHECK_OK(wait_op(r));
    if (r != NULL) ucp_request_free(r);
    r = ucp_stream_send_nbx(ep, buf + 1000777, 2000000, &p);
    CHECK_OK(wait_op(r));
    if (r != NULL) ucp_request_free(r);
    barrier(fd); /* phase 2: data for recv_data_nb */
    r = ucp_stream_send_nbx(ep, buf, 5000, &p);
    CHECK_OK(wait_op(r));
    if (r != NULL) ucp_request_free(r);
    teardown(fd);
    free(buf);
    printf("[%d] stream sender passed\n", (int)getpid());
    return 0;
}

static int receiver(int fd)
{
    char *buf = malloc(TOTAL);
    size_t got = 0, len = 0, want;
    ucp_request_param_t p;
    void *r;
    setup(fd);
    memset(buf, 0, TOTAL);
    /* exactly 100 bytes, then pieces of whatever size arrived, then the rest exactly */
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags        = UCP_STREAM_RECV_FLAG_WAITALL;
    r = ucp_stream_recv_nbx(ep, buf, 100, &len, &p);
    if (r == NULL) {
        CHECK(len == 100, "waitall immediate length %zu", len);
    } else {
        CHECK_OK(wait_op(r));
        CHECK_OK(ucp_stream_recv_request_test(r, &len));
        CHECK(len == 100, "waitall length %zu", len);
        ucp_request_free(r);
    }
    got = 100;
    while (got < 2000000) {
        r = ucp_stream_recv_nb(ep, buf + got, 2000000 - got, ucp_dt_make_contig(1), recv_cb,
                               &len, 0);
        if (r == NULL) {
            CHECK(len > 0, "empty immediate receive");
        } else {
            CHECK_OK(wait_op(r));
            CHECK_OK(ucp_stream_recv_request_test(r, &len));
            ucp_request_free(r);
        }
        got += len;
    }
    want = TOTAL - got;
    r = ucp_stream_recv_nbx(ep, buf + got, want, &len, &p);
    if (r != NULL) {
        CHECK_OK(wait_op(r));
        CHECK_OK(ucp_stream_recv_request_test(r, &len));
        ucp_request_free(r);
    }
    CHECK(len == want, "final waitall length %zu of %zu", len, want);
    CHECK(verify(buf, TOTAL, 50) == 0, "stream data out of order or damaged");
    barrier(fd);
    /* recv_data_nb: library buffers, released by the application */
    got = 0;
    while (got < 5000) {
        void *d;
        ucp_worker_progress(worker);
        d = ucp_stream_recv_data_nb(ep, &len);
        CHECK(!UCS_PTR_IS_ERR(d), "recv_data_nb");
        if (d != NULL) {
            memcpy(buf + got, d, len);
            got += len;
            ucp_stream_data_release(ep, d);
        }
    }
    CHECK(got == 5000 && verify(buf, 5000, 50) == 0, "recv_data_nb data");
    teardown(fd);
    free(buf);
    printf("[%d] stream receiver passed\n", (int)getpid());
    return 0;
}

int main(void)
{
    return run_pair(sender, receiver);
}
