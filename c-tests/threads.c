/* A UCS_THREAD_MODE_MULTI worker used by several threads at once: in each of two
 * processes, four threads send and receive tagged messages concurrently on one worker
 * and one endpoint, each progressing it, with callbacks and request frees racing with
 * completion on other threads. */
#include "common.h"
#include <pthread.h>

enum { THREADS = 4, MSGS = 2000 };

static ucp_context_h ctx;
static ucp_worker_h worker;
static ucp_ep_h ep;
static int rank;

static void setup(int fd)
{
    ucp_params_t params;
    ucp_worker_params_t wparams;
    ucp_worker_attr_t wattr;
    ucp_ep_params_t eparams;
    ucp_address_t *addr;
    size_t addr_len;
    void *peer;
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    params.features   = UCP_FEATURE_TAG;
    params.mt_workers_shared = 1;
    CHECK_OK(ucp_init(&params, NULL, &ctx));
    memset(&wparams, 0, sizeof(wparams));
    wparams.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_MULTI;
    CHECK_OK(ucp_worker_create(ctx, &wparams, &worker));
    wattr.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE;
    CHECK_OK(ucp_worker_query(worker, &wattr));
    CHECK(wattr.thread_mode == UCS_THREAD_MODE_MULTI, "thread mode %d", wattr.thread_mode);
    CHECK_OK(ucp_worker_get_address(worker, &addr, &addr_len));
    peer = exchange(fd, addr, addr_len, NULL);
    ucp_worker_release_address(worker, addr);
    memset(&eparams, 0, sizeof(eparams));
    eparams.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    eparams.address    = peer;
    CHECK_OK(ucp_ep_create(worker, &eparams, &ep));
    free(peer);
}

static void done_cb(void *req, ucs_status_t status, void *user_data)
{
    CHECK_OK(status);
    __atomic_fetch_add((int*)user_data, 1, __ATOMIC_RELAXED);
    (void)req;
}

static void recv_cb(void *req, ucs_status_t status, const ucp_tag_recv_info_t *info,
                    void *user_data)
{
    CHECK_OK(status);
    CHECK(info->length == 64, "length %zu", info->length);
    __atomic_fetch_add((int*)user_data, 1, __ATOMIC_RELAXED);
    (void)req;
}

static void *thread_main(void *arg)
{
    int t = (int)(intptr_t)arg, sent = 0, received = 0;
    char sbuf[64], (*rbufs)[64] = malloc(MSGS * 64);
    ucp_request_param_t sp, rp;
    memset(&sp, 0, sizeof(sp));
    sp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    sp.cb.send      = done_cb;
    sp.user_data    = &sent;
    memset(&rp, 0, sizeof(rp));
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    rp.cb.recv      = recv_cb;
    rp.user_data    = &received;
    /* post every receive first (their requests are released at once: the callback
     * counts them), then send */
    for (int i = 0; i < MSGS; i++) {
        void *r = ucp_tag_recv_nbx(worker, rbufs[i], 64, ((uint64_t)t << 32) | i,
                                   (ucp_tag_t)-1, &rp);
        CHECK(!UCS_PTR_IS_ERR(r), "recv");
        if (r == NULL) {
            __atomic_fetch_add(&received, 1, __ATOMIC_RELAXED);
        } else {
            ucp_request_release(r);
        }
    }
    for (int i = 0; i < MSGS; i++) {
        void *r;
        fill(sbuf, 64, (unsigned)(t * MSGS + i));
        r = ucp_tag_send_nbx(ep, sbuf, 64, ((uint64_t)t << 32) | i, &sp);
        CHECK(!UCS_PTR_IS_ERR(r), "send");
        if (r == NULL) {
            __atomic_fetch_add(&sent, 1, __ATOMIC_RELAXED);
        } else {
            while (ucp_request_check_status(r) == UCS_INPROGRESS) {
                ucp_worker_progress(worker);
            }
            ucp_request_free(r);
        }
        ucp_worker_progress(worker);
    }
    while (__atomic_load_n(&received, __ATOMIC_RELAXED) < MSGS ||
           __atomic_load_n(&sent, __ATOMIC_RELAXED) < MSGS) {
        ucp_worker_progress(worker);
    }
    for (int i = 0; i < MSGS; i++) {
        CHECK(verify(rbufs[i], 64, (unsigned)(t * MSGS + i)) == 0, "thread %d message %d", t, i);
    }
    free(rbufs);
    return NULL;
}

static int side(int fd, int r)
{
    pthread_t th[THREADS];
    rank = r;
    setup(fd);
    barrier(fd);
    for (int t = 0; t < THREADS; t++) {
        CHECK(pthread_create(&th[t], NULL, thread_main, (void*)(intptr_t)t) == 0, "thread");
    }
    for (int t = 0; t < THREADS; t++) {
        pthread_join(th[t], NULL);
    }
    barrier(fd);
    ucp_ep_destroy(ep);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    printf("[%d] threads test passed (rank %d)\n", (int)getpid(), rank);
    return 0;
}

static int parent(int fd) { return side(fd, 0); }
static int child(int fd) { return side(fd, 1); }

int main(void)
{
    return run_pair(parent, child);
}
