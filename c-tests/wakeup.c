/* Blocking waits: ucp_worker_get_efd + ucp_worker_arm + poll, ucp_worker_wait, the
 * worker's descriptor in an application epoll set, ucp_worker_signal waking a waiting
 * thread, and a worker made with UCP_WORKER_PARAM_FIELD_EVENT_FD (its events reach the
 * application's epoll set; ucp_worker_get_efd is unsupported then, as in UCX). The
 * receiver sleeps instead of spinning. */
#include "common.h"
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>

static ucp_context_h ctx;
static ucp_worker_h worker;
static ucp_ep_h ep;
static int epfd;

static void setup(int fd)
{
    ucp_params_t params;
    ucp_worker_params_t wparams;
    ucp_ep_params_t eparams;
    ucp_address_t *addr;
    size_t addr_len;
    void *peer;
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features   = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
    CHECK_OK(ucp_init(&params, NULL, &ctx));
    memset(&wparams, 0, sizeof(wparams));
    wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_MULTI;
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
    barrier(fd);
    ucp_ep_destroy(ep);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
}

static int sender(int fd)
{
    char buf[256];
    ucp_request_param_t p;
    void *r;
    setup(fd);
    memset(&p, 0, sizeof(p));
    for (int round = 0; round < 3; round++) {
        barrier(fd);
        usleep(200000); /* the receiver is asleep by now */
        fill(buf, sizeof(buf), round);
        r = ucp_tag_send_nbx(ep, buf, sizeof(buf), round, &p);
        if (r != NULL) {
            CHECK(!UCS_PTR_IS_ERR(r), "send");
            while (ucp_request_check_status(r) == UCS_INPROGRESS) {
                ucp_worker_progress(worker);
            }
            ucp_request_free(r);
        }
        /* a locally completed send may still sit in the transport (a TCP connection
         * still being set up): flush before leaving the library alone */
        CHECK_OK(ucp_worker_flush(worker));
    }
    teardown(fd);
    printf("[%d] wakeup sender passed\n", (int)getpid());
    return 0;
}

/* A second worker whose descriptor goes into an epoll set of ours at creation. */
static void external_event_fd_test(void)
{
    ucp_worker_params_t wparams;
    ucp_worker_h w2;
    struct epoll_event ev;
    int fd2, ep2 = epoll_create1(0);
    CHECK(ep2 >= 0, "epoll_create1");
    memset(&wparams, 0, sizeof(wparams));
    wparams.field_mask = UCP_WORKER_PARAM_FIELD_EVENT_FD | UCP_WORKER_PARAM_FIELD_USER_DATA;
    wparams.event_fd   = ep2;
    wparams.user_data  = (void*)0x1234;
    CHECK_OK(ucp_worker_create(ctx, &wparams, &w2));
    CHECK(ucp_worker_get_efd(w2, &fd2) == UCS_ERR_UNSUPPORTED, "get_efd with an external fd");
    CHECK(epoll_wait(ep2, &ev, 1, 0) == 0, "event before anything happened");
    while (ucp_worker_arm(w2) == UCS_ERR_BUSY) {
        ucp_worker_progress(w2);
    }
    CHECK_OK(ucp_worker_signal(w2));
    CHECK(epoll_wait(ep2, &ev, 1, 10000) == 1, "signal did not reach the epoll set");
    CHECK(ev.data.ptr == (void*)0x1234, "epoll user data");
    ucp_worker_progress(w2);
    ucp_worker_destroy(w2);
    close(ep2);
}

static void *signaller(void *arg)
{
    usleep(200000);
    CHECK_OK(ucp_worker_signal((ucp_worker_h)arg));
    return NULL;
}

/* Receives round `round`, sleeping in the way `how` names. */
static void recv_round(int round, int how, int efd)
{
    char buf[256];
    ucp_request_param_t p;
    void *r;
    int sleeps = 0;
    memset(&p, 0, sizeof(p));
    r = ucp_tag_recv_nbx(worker, buf, sizeof(buf), round, (ucp_tag_t)-1, &p);
    CHECK(UCS_PTR_IS_PTR(r), "receive posted");
    while (ucp_request_check_status(r) == UCS_INPROGRESS) {
        if (ucp_worker_progress(worker) != 0) {
            continue;
        }
        if (how == 0) {
            ucs_status_t st = ucp_worker_arm(worker);
            if (st == UCS_ERR_BUSY) {
                continue;
            }
            CHECK_OK(st);
            struct pollfd pfd = {efd, POLLIN, 0};
            CHECK(poll(&pfd, 1, 10000) == 1, "no wakeup within 10 s");
        } else if (how == 1) {
            CHECK_OK(ucp_worker_wait(worker));
        } else {
            struct epoll_event ev;
            ucs_status_t st = ucp_worker_arm(worker);
            if (st == UCS_ERR_BUSY) {
                continue;
            }
            CHECK(epoll_wait(epfd, &ev, 1, 10000) == 1, "no epoll wakeup within 10 s");
            CHECK(ev.data.ptr == (void*)0x1234, "epoll user data");
        }
        sleeps++;
    }
    CHECK_OK(ucp_request_check_status(r));
    ucp_request_free(r);
    CHECK(verify(buf, sizeof(buf), round) == 0, "data");
    CHECK(sleeps > 0, "round %d never slept", round);
}

static int receiver(int fd)
{
    int efd;
    pthread_t t;
    setup(fd);
    CHECK_OK(ucp_worker_get_efd(worker, &efd));
    epfd = epoll_create1(0);
    CHECK(epfd >= 0, "epoll_create1");
    {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = (void*)0x1234};
        CHECK(epoll_ctl(epfd, EPOLL_CTL_ADD, efd, &ev) == 0, "epoll_ctl");
    }
    for (int round = 0; round < 3; round++) {
        barrier(fd);
        recv_round(round, round, efd);
    }
    /* a signal from another thread ends a wait with nothing to receive */
    CHECK(pthread_create(&t, NULL, signaller, worker) == 0, "thread");
    CHECK_OK(ucp_worker_wait(worker));
    pthread_join(t, NULL);
    external_event_fd_test();
    teardown(fd);
    printf("[%d] wakeup receiver passed\n", (int)getpid());
    return 0;
}

int main(void)
{
    return run_pair(sender, receiver);
}
