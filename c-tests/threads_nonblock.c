/* Thread mode multi without a blocking worker lock: while one thread is held inside the
 * worker (its generic datatype's pack callback waits there), another thread's
 * ucp_worker_progress returns 0 at once, and its tag receives and sends return requests
 * at once without waiting (they are still in progress: nobody could start them yet).
 * Once the first thread leaves, everything completes: every callback runs exactly once
 * and every byte received is checked. One process, an endpoint to its own worker. An
 * alarm turns a call that would wait for the held worker into a failure. */
#include "common.h"
#include <pthread.h>
#include <sched.h>
#include <time.h>

enum { N = 64, LEN = 64, HELD_TAG = 7 };

static ucp_context_h ctx;
static ucp_worker_h worker;
static ucp_ep_h ep;
static int inside, release_pack;
static int sends_done, recvs_done;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Waits (yielding) until *flag is set; fails after 20 seconds. */
static void wait_flag(int *flag, const char *what)
{
    double end = now() + 20.0;
    while (!__atomic_load_n(flag, __ATOMIC_ACQUIRE)) {
        CHECK(now() < end, "timed out waiting for %s", what);
        sched_yield();
    }
}

/* The generic datatype of the held thread's message: bytes of a plain buffer. */
typedef struct {
    const unsigned char *buf;
    size_t len;
} state_t;

static void *start_pack(void *context, const void *buffer, size_t count)
{
    state_t *s = malloc(sizeof(*s));
    s->buf = buffer;
    s->len = count;
    (void)context;
    return s;
}

static void *start_unpack(void *context, void *buffer, size_t count)
{
    return start_pack(context, buffer, count);
}

static size_t packed_size(void *state)
{
    return ((state_t*)state)->len;
}

static size_t pack(void *state, size_t offset, void *dest, size_t max)
{
    state_t *s = state;
    size_t n = s->len - offset < max ? s->len - offset : max;
    /* Runs inside the worker: hold it until the main thread has done its calls. */
    __atomic_store_n(&inside, 1, __ATOMIC_RELEASE);
    wait_flag(&release_pack, "the release of the pack callback");
    memcpy(dest, s->buf + offset, n);
    return n;
}

static ucs_status_t unpack(void *state, size_t offset, const void *src, size_t length)
{
    (void)state; (void)offset; (void)src; (void)length;
    return UCS_ERR_UNSUPPORTED;
}

static void finish(void *state)
{
    free(state);
}

static const ucp_generic_dt_ops_t ops = {start_pack, start_unpack, packed_size, pack, unpack,
                                         finish};

static void send_cb(void *req, ucs_status_t status, void *user_data)
{
    CHECK_OK(status);
    __atomic_fetch_add((int*)user_data, 1, __ATOMIC_RELAXED);
    (void)req;
}

static void recv_cb(void *req, ucs_status_t status, const ucp_tag_recv_info_t *info,
                    void *user_data)
{
    CHECK_OK(status);
    CHECK(info->length == LEN, "length %zu", info->length);
    __atomic_fetch_add((int*)user_data, 1, __ATOMIC_RELAXED);
    (void)req;
}

static void *held_thread(void *arg)
{
    ucp_datatype_t dt = *(ucp_datatype_t*)arg;
    unsigned char buf[LEN];
    ucp_request_param_t p;
    void *r;
    fill(buf, LEN, 999);
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    p.datatype     = dt;
    r = ucp_tag_send_nbx(ep, buf, LEN, HELD_TAG, &p);
    CHECK(!UCS_PTR_IS_ERR(r), "held send: %s", ucs_status_string(UCS_PTR_STATUS(r)));
    if (r != NULL) {
        CHECK_OK(wait_and_free(worker, r));
    }
    return NULL;
}

int main(void)
{
    ucp_params_t params;
    ucp_worker_params_t wparams;
    ucp_ep_params_t eparams;
    ucp_address_t *addr;
    size_t addr_len;
    ucp_datatype_t dt;
    pthread_t th;
    static unsigned char sbufs[N][LEN], rbufs[N][LEN], held_rbuf[LEN];
    void *sreq[N], *rreq[N], *held_req;
    ucp_request_param_t sp, rp, hp;
    double end;

    alarm(60);
    printf("library: %s\n", ucp_get_version_string());
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features   = UCP_FEATURE_TAG;
    CHECK_OK(ucp_init(&params, NULL, &ctx));
    memset(&wparams, 0, sizeof(wparams));
    wparams.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_MULTI;
    CHECK_OK(ucp_worker_create(ctx, &wparams, &worker));
    CHECK_OK(ucp_worker_get_address(worker, &addr, &addr_len));
    memset(&eparams, 0, sizeof(eparams));
    eparams.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    eparams.address    = addr;
    CHECK_OK(ucp_ep_create(worker, &eparams, &ep));
    ucp_worker_release_address(worker, addr);
    CHECK_OK(ucp_dt_create_generic(&ops, NULL, &dt));

    memset(&sp, 0, sizeof(sp));
    sp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    sp.cb.send      = send_cb;
    sp.user_data    = &sends_done;
    memset(&rp, 0, sizeof(rp));
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    rp.cb.recv      = recv_cb;
    rp.user_data    = &recvs_done;
    memset(&hp, 0, sizeof(hp));

    /* The held thread's message lands here. */
    held_req = ucp_tag_recv_nbx(worker, held_rbuf, LEN, HELD_TAG, (ucp_tag_t)-1, &hp);
    CHECK(held_req != NULL && !UCS_PTR_IS_ERR(held_req), "held receive");

    CHECK(pthread_create(&th, NULL, held_thread, &dt) == 0, "thread");
    wait_flag(&inside, "the held thread to enter the worker");

    /* The worker is held: none of these may wait for it. */
    CHECK(ucp_worker_progress(worker) == 0, "progress while another thread is inside");
    for (int i = 0; i < N; i++) {
        rreq[i] = ucp_tag_recv_nbx(worker, rbufs[i], LEN, 100 + i, (ucp_tag_t)-1, &rp);
        CHECK(rreq[i] != NULL && !UCS_PTR_IS_ERR(rreq[i]), "receive %d", i);
    }
    for (int i = 0; i < N; i++) {
        fill(sbufs[i], LEN, (unsigned)i);
        sreq[i] = ucp_tag_send_nbx(ep, sbufs[i], LEN, 100 + i, &sp);
        CHECK(sreq[i] != NULL && !UCS_PTR_IS_ERR(sreq[i]), "send %d", i);
    }
    CHECK(ucp_worker_progress(worker) == 0, "progress while another thread is inside");
    for (int i = 0; i < N; i++) {
        CHECK(ucp_request_check_status(sreq[i]) == UCS_INPROGRESS, "send %d finished early", i);
        CHECK(ucp_request_check_status(rreq[i]) == UCS_INPROGRESS, "recv %d finished early", i);
    }
    /* Half the requests are given back before they complete, from this thread, while
     * the worker is still held. */
    for (int i = 0; i < N; i += 2) {
        ucp_request_free(sreq[i]);
        ucp_request_free(rreq[i]);
    }
    CHECK(__atomic_load_n(&inside, __ATOMIC_ACQUIRE) &&
          !__atomic_load_n(&release_pack, __ATOMIC_ACQUIRE), "still held");
    __atomic_store_n(&release_pack, 1, __ATOMIC_RELEASE);
    CHECK(pthread_join(th, NULL) == 0, "join");

    end = now() + 20.0;
    while (__atomic_load_n(&sends_done, __ATOMIC_RELAXED) < N / 2 ||
           __atomic_load_n(&recvs_done, __ATOMIC_RELAXED) < N / 2 ||
           ucp_request_check_status(held_req) == UCS_INPROGRESS) {
        CHECK(now() < end, "completions: %d sends, %d receives", sends_done, recvs_done);
        ucp_worker_progress(worker);
    }
    for (int i = 1; i < N; i += 2) {
        while (ucp_request_check_status(sreq[i]) == UCS_INPROGRESS ||
               ucp_request_check_status(rreq[i]) == UCS_INPROGRESS) {
            CHECK(now() < end, "request %d", i);
            ucp_worker_progress(worker);
        }
        CHECK_OK(ucp_request_check_status(sreq[i]));
        CHECK_OK(ucp_request_check_status(rreq[i]));
        ucp_request_free(sreq[i]);
        ucp_request_free(rreq[i]);
    }
    /* Callbacks were dropped for the requests freed early (ucp_request_free), so each
     * counter has exactly the other half. */
    for (int i = 0; i < 100; i++) {
        ucp_worker_progress(worker);
    }
    CHECK(sends_done == N / 2 && recvs_done == N / 2, "%d sends, %d receives called back",
          sends_done, recvs_done);
    CHECK_OK(ucp_request_check_status(held_req));
    ucp_request_free(held_req);
    CHECK(verify(held_rbuf, LEN, 999) == 0, "held thread's message");
    for (int i = 0; i < N; i++) {
        CHECK(verify(rbufs[i], LEN, (unsigned)i) == 0, "message %d", i);
    }
    ucp_dt_destroy(dt);
    ucp_ep_destroy(ep);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    printf("[%d] threads nonblock test passed\n", (int)getpid());
    return 0;
}
