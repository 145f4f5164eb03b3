/* Completion queues (rucx_cq_*, rucx/ucp_ext.h) between two processes: the receiver
 * preposts thousands of tag receives that report into one queue, the sender's sends and
 * a flush report into another; every entry is checked (once each, kind, status, length,
 * tag) and every byte received. Also the refusals: a queue together with a callback, a
 * bad handle, a queue for ucp_ep_close_nbx. Built with rucx's headers only. */
#include "common.h"
#include <rucx/ucp_ext.h>

#define N   3000
#define LEN 40

static ucp_context_h ctx;
static ucp_worker_h worker;
static ucp_ep_h ep;

static rucx_request_param_t cq_param(rucx_cq_h cq, size_t user)
{
    rucx_request_param_t p;
    memset(&p, 0, sizeof(p));
    p.super.op_attr_mask = RUCX_OP_ATTR_FIELD_CQ | UCP_OP_ATTR_FIELD_USER_DATA;
    p.super.user_data    = (void*)user;
    p.cq                 = cq;
    return p;
}

/* Progresses until `want` entries came from `cq`; checks each is new and of `op`. */
static void collect(rucx_cq_h cq, size_t want, uint32_t op, rucx_cq_entry_t *all)
{
    static unsigned char seen[N + 1];
    rucx_cq_entry_t e[64];
    size_t got = 0;
    memset(seen, 0, sizeof(seen));
    while (got < want) {
        ssize_t n;
        ucp_worker_progress(worker);
        n = rucx_cq_poll(cq, e, 64);
        CHECK(n >= 0, "poll failed: %zd", n);
        for (ssize_t i = 0; i < n; i++) {
            size_t u = (size_t)e[i].user_data;
            CHECK(u <= N && !seen[u], "entry for %zu twice or unknown", u);
            CHECK(e[i].op == op, "entry %zu: op %u, expected %u", u, e[i].op, op);
            seen[u] = 1;
            all[u]  = e[i];
        }
        got += (size_t)n;
    }
    for (int i = 0; i < 100; i++) {
        ucp_worker_progress(worker);
    }
    CHECK(rucx_cq_poll(cq, e, 64) == 0, "an entry beyond those expected");
}

static int receiver(int fd)
{
    static unsigned char buf[N * LEN];
    static rucx_cq_entry_t all[N + 1];
    rucx_cq_params_t qp = {.field_mask = RUCX_CQ_PARAM_FIELD_CAPACITY, .capacity = 256};
    rucx_cq_h cq;
    connect_peer(fd, UCP_FEATURE_TAG, &ctx, &worker, &ep);
    CHECK_OK(rucx_cq_create(worker, &qp, &cq));
    memset(buf, 0xee, sizeof(buf));
    for (size_t i = 0; i < N; i++) {
        rucx_request_param_t p = cq_param(cq, i);
        void *r = ucp_tag_recv_nbx(worker, buf + i * LEN, LEN, 1000 + i, (ucp_tag_t)-1,
                                   &p.super);
        CHECK(r == NULL, "receive %zu: %p", i, r);
    }
    barrier(fd); /* posted */
    collect(cq, N, RUCX_CQ_OP_TAG_RECV, all);
    for (size_t i = 0; i < N; i++) {
        CHECK(all[i].status == UCS_OK, "receive %zu: status %d", i, all[i].status);
        CHECK(all[i].length == LEN && all[i].tag == 1000 + i, "receive %zu: %zu bytes, tag %lu",
              i, all[i].length, (unsigned long)all[i].tag);
        CHECK(verify(buf + i * LEN, LEN, (unsigned)i) == 0, "bytes of message %zu", i);
    }
    barrier(fd); /* checked */
    rucx_cq_destroy(cq);
    ucp_ep_destroy(ep);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    printf("cq receiver passed\n");
    return 0;
}

static int sender(int fd)
{
    static unsigned char data[N * LEN];
    static rucx_cq_entry_t all[N + 1];
    rucx_cq_h cq;
    rucx_cq_entry_t e = {0};
    rucx_request_param_t p;
    void *r;
    connect_peer(fd, UCP_FEATURE_TAG, &ctx, &worker, &ep);
    CHECK_OK(rucx_cq_create(worker, NULL, &cq));
    /* refusals: a queue and a callback at once; a bad queue handle; bad arrays */
    p = cq_param(cq, 1);
    p.super.op_attr_mask |= UCP_OP_ATTR_FIELD_CALLBACK;
    r = ucp_tag_send_nbx(ep, data, LEN, 1, &p.super);
    CHECK(UCS_PTR_IS_ERR(r) && UCS_PTR_STATUS(r) == UCS_ERR_INVALID_PARAM, "cq + callback");
    p = cq_param(NULL, 1);
    r = ucp_tag_send_nbx(ep, data, LEN, 1, &p.super);
    CHECK(UCS_PTR_IS_ERR(r) && UCS_PTR_STATUS(r) == UCS_ERR_INVALID_PARAM, "NULL cq handle");
    CHECK(rucx_cq_poll(cq, NULL, 4) < 0, "NULL entries");
    CHECK(rucx_cq_poll(cq, &e, 0) == 0, "max 0");
    CHECK(rucx_cq_create(worker, NULL, NULL) == UCS_ERR_INVALID_PARAM, "NULL output");
    for (size_t i = 0; i < N; i++) {
        fill(data + i * LEN, LEN, (unsigned)i);
    }
    barrier(fd); /* the receiver posted */
    for (size_t i = 0; i < N; i++) {
        p = cq_param(cq, i);
        r = ucp_tag_send_nbx(ep, data + i * LEN, LEN, 1000 + i, &p.super);
        CHECK(r == NULL, "send %zu: %p", i, r);
        if (i % 64 == 0) {
            ucp_worker_progress(worker);
        }
    }
    collect(cq, N, RUCX_CQ_OP_TAG_SEND, all);
    p = cq_param(cq, N);
    r = ucp_ep_flush_nbx(ep, &p.super);
    CHECK(r == NULL, "flush: %p", r);
    collect(cq, 1, RUCX_CQ_OP_FLUSH, all);
    CHECK(all[N].status == UCS_OK, "flush status %d", all[N].status);
    for (size_t i = 0; i < N; i++) {
        CHECK(all[i].status == UCS_OK && all[i].length == LEN && all[i].tag == 1000 + i,
              "send %zu: status %d, %zu bytes", i, all[i].status, all[i].length);
    }
    barrier(fd); /* checked */
    p = cq_param(cq, 1);
    r = ucp_ep_close_nbx(ep, &p.super);
    CHECK(UCS_PTR_IS_ERR(r) && UCS_PTR_STATUS(r) == UCS_ERR_UNSUPPORTED, "close with a cq");
    rucx_cq_destroy(cq);
    ucp_ep_destroy(ep);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    printf("cq sender passed\n");
    return 0;
}

int main(void)
{
    return run_pair(receiver, sender);
}
