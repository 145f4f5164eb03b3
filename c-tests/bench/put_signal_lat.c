/* Latency of "put, then tell the target", as the target sees it: a ping-pong between two
 * processes of one host where a round ends when the round's signal shows at the other side.
 * Not a CI test; scripts/bench-put-signal builds and runs it.
 *
 *   put_signal_lat MODE [-s SIZE] [-n ITERS] [-w WARMUP] [-c CPU_A,CPU_B]
 *
 * MODE rucx:      rucx_put_signal_nbx (data and a 64-bit add to the peer's signal word in
 *                 one call; built only with -DWITH_RUCX_EXT against rucx's headers).
 * MODE emulated:  what a UCX client writes without it: ucp_put_nbx, ucp_ep_flush_nbx
 *                 (waited for), then ucp_am_send_nbx; the target's AM handler counts.
 *
 * Prints "latency_us <half the median round trip> avg_us <half the average>": the median
 * of every round, since a shared machine's interruptions show in the average. Each process
 * is pinned to its CPU. */
#define _GNU_SOURCE
#include <ucp/api/ucp.h>
#ifdef WITH_RUCX_EXT
#include <rucx/ucp_ext.h>
#endif
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <sys/prctl.h>
#include <signal.h>

#define DIE_IF(cond, what)                                                   \
    do {                                                                     \
        if (cond) {                                                          \
            fprintf(stderr, "[%d] put_signal_lat: %s\n", (int)getpid(), what); \
            exit(1);                                                         \
        }                                                                    \
    } while (0)
#define OK(st) DIE_IF((st) != UCS_OK, ucs_status_string(st))

enum { AM_ID = 7 };

static ucp_context_h ctx;
static ucp_worker_h worker;
static ucp_ep_h ep;
static ucp_mem_h memh;
static ucp_rkey_h peer_key;
static char *mine;
static uint64_t peer_base;
static size_t size = 8, sig_off;
static volatile uint64_t am_count;

static void xfer(int fd, void *buf, size_t len, int out)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = out ? write(fd, p, len) : read(fd, p, len);
        DIE_IF(n <= 0, "socket");
        p += n;
        len -= (size_t)n;
    }
}

/* Sends ours, returns the peer's (malloc'd). */
static void *swap_blob(int fd, const void *ours, size_t len)
{
    uint64_t l = len, pl;
    void *theirs;
    xfer(fd, &l, 8, 1);
    xfer(fd, (void*)ours, len, 1);
    xfer(fd, &pl, 8, 0);
    theirs = malloc(pl ? pl : 1);
    xfer(fd, theirs, pl, 0);
    return theirs;
}

static ucs_status_t on_am(void *arg, const void *header, size_t header_length, void *data,
                          size_t length, const ucp_am_recv_param_t *param)
{
    (void)arg; (void)header; (void)header_length; (void)data; (void)length; (void)param;
    am_count++;
    return UCS_OK;
}

static void wait_req(void *r)
{
    ucs_status_t st;
    if (r == NULL) {
        return;
    }
    DIE_IF(UCS_PTR_IS_ERR(r), ucs_status_string(UCS_PTR_STATUS(r)));
    while ((st = ucp_request_check_status(r)) == UCS_INPROGRESS) {
        ucp_worker_progress(worker);
    }
    OK(st);
    ucp_request_free(r);
}

static void setup(int fd)
{
    ucp_params_t params;
    ucp_worker_params_t wparams;
    ucp_ep_params_t eparams;
    ucp_mem_map_params_t mp;
    ucp_mem_attr_t attr;
    ucp_am_handler_param_t ap;
    ucp_address_t *addr;
    size_t addr_len, key_len;
    void *peer, *kbuf;
    uint64_t base;

    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features   = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_AMO64;
    OK(ucp_init(&params, NULL, &ctx));
    memset(&wparams, 0, sizeof(wparams));
    OK(ucp_worker_create(ctx, &wparams, &worker));
    OK(ucp_worker_get_address(worker, &addr, &addr_len));
    peer = swap_blob(fd, addr, addr_len);
    ucp_worker_release_address(worker, addr);
    memset(&eparams, 0, sizeof(eparams));
    eparams.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    eparams.address    = peer;
    OK(ucp_ep_create(worker, &eparams, &ep));
    free(peer);

    memset(&ap, 0, sizeof(ap));
    ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB;
    ap.id         = AM_ID;
    ap.cb         = on_am;
    OK(ucp_worker_set_am_recv_handler(worker, &ap));

    sig_off = (size + 7) / 8 * 8;
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.length     = sig_off + 8;
    mp.flags      = UCP_MEM_MAP_ALLOCATE;
    OK(ucp_mem_map(ctx, &mp, &memh));
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
    OK(ucp_mem_query(memh, &attr));
    mine = attr.address;
    memset(mine, 0, sig_off + 8);
    OK(ucp_rkey_pack(ctx, memh, &kbuf, &key_len));
    base = (uintptr_t)mine;
    xfer(fd, &base, 8, 1);
    xfer(fd, &peer_base, 8, 0);
    peer = swap_blob(fd, kbuf, key_len);
    ucp_rkey_buffer_release(kbuf);
    OK(ucp_ep_rkey_unpack(ep, peer, &peer_key));
    free(peer);
}

static uint64_t my_signal(void)
{
    return __atomic_load_n((uint64_t*)(mine + sig_off), __ATOMIC_ACQUIRE);
}

/* One signalled put to the peer. */
static void signal_peer(int rucx, const char *src)
{
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    if (rucx) {
#ifdef WITH_RUCX_EXT
        wait_req(rucx_put_signal_nbx(ep, src, size, peer_base, peer_key, peer_base + sig_off,
                                     peer_key, RUCX_SIGNAL_OP_ADD, 1, &p));
#else
        DIE_IF(1, "built without rucx's extension");
#endif
    } else {
        static uint64_t one = 1;
        wait_req(ucp_put_nbx(ep, src, size, peer_base, peer_key, &p));
        wait_req(ucp_ep_flush_nbx(ep, &p));
        wait_req(ucp_am_send_nbx(ep, AM_ID, NULL, 0, &one, sizeof(one), &p));
    }
}

/* Waits for the round-`n` signal from the peer. */
static void wait_signal(int rucx, uint64_t n)
{
    if (rucx) {
        while (my_signal() < n) {
            ucp_worker_progress(worker);
        }
    } else {
        while (am_count < n) {
            ucp_worker_progress(worker);
        }
    }
}

static void pin(int cpu)
{
    cpu_set_t s;
    if (cpu < 0) {
        return;
    }
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    DIE_IF(sched_setaffinity(0, sizeof(s), &s) != 0, "cannot pin");
}

static double ns_between(const struct timespec *a, const struct timespec *b)
{
    return (double)(b->tv_sec - a->tv_sec) * 1e9 + (double)(b->tv_nsec - a->tv_nsec);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

static int side(int fd, int initiator, int rucx, long iters, long warmup, int cpu)
{
    char *src;
    struct timespec t0 = {0, 0}, t1, prev = {0, 0}, now;
    double *rt = initiator ? malloc(sizeof(double) * (size_t)iters) : NULL;
    char c = 's';
    pin(cpu);
    setup(fd);
    src = malloc(size);
    for (size_t i = 0; i < size; i++) {
        src[i] = (char)(i * 7 + 3);
    }
    xfer(fd, &c, 1, 1);
    xfer(fd, &c, 1, 0);
    for (long i = 0; i < warmup + iters; i++) {
        if (i == warmup) {
            clock_gettime(CLOCK_MONOTONIC, &t0);
            prev = t0;
        }
        if (initiator) {
            signal_peer(rucx, src);
            wait_signal(rucx, (uint64_t)i + 1);
            if (i >= warmup) {
                clock_gettime(CLOCK_MONOTONIC, &now);
                rt[i - warmup] = ns_between(&prev, &now);
                prev = now;
            }
        } else {
            wait_signal(rucx, (uint64_t)i + 1);
            signal_peer(rucx, src);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    /* the data each side got must be the pattern */
    for (size_t i = 0; i < size; i++) {
        DIE_IF(mine[i] != src[i], "wrong data in the region");
    }
    wait_req(ucp_ep_flush_nbx(ep, &(ucp_request_param_t){0}));
    xfer(fd, &c, 1, 1);
    xfer(fd, &c, 1, 0);
    if (initiator) {
        qsort(rt, (size_t)iters, sizeof(double), cmp_double);
        printf("latency_us %.4f avg_us %.4f\n", rt[iters / 2] / 2.0 / 1000.0,
               ns_between(&t0, &t1) / (double)iters / 2.0 / 1000.0);
        fflush(stdout);
        free(rt);
    }
    ucp_rkey_destroy(peer_key);
    OK(ucp_mem_unmap(ctx, memh));
    ucp_ep_destroy(ep);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    free(src);
    return 0;
}

int main(int argc, char **argv)
{
    long iters = 200000, warmup = 10000;
    int cpu_a = -1, cpu_b = -1, rucx, sv[2], status;
    pid_t pid;
    if (argc < 2) {
        fprintf(stderr, "usage: %s rucx|emulated [-s SIZE] [-n ITERS] [-w WARMUP] [-c A,B]\n",
                argv[0]);
        return 2;
    }
    rucx = strcmp(argv[1], "rucx") == 0;
    DIE_IF(!rucx && strcmp(argv[1], "emulated") != 0, "mode is rucx or emulated");
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-s")) {
            size = (size_t)atol(argv[i + 1]);
        } else if (!strcmp(argv[i], "-n")) {
            iters = atol(argv[i + 1]);
        } else if (!strcmp(argv[i], "-w")) {
            warmup = atol(argv[i + 1]);
        } else if (!strcmp(argv[i], "-c")) {
            DIE_IF(sscanf(argv[i + 1], "%d,%d", &cpu_a, &cpu_b) != 2, "-c A,B");
        } else {
            DIE_IF(1, "unknown option");
        }
    }
    DIE_IF(size == 0 || iters <= 0 || warmup < 0, "bad size or counts");
    DIE_IF(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0, "socketpair");
    pid = fork();
    DIE_IF(pid < 0, "fork");
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(sv[0]);
        exit(side(sv[1], 0, rucx, iters, warmup, cpu_b));
    }
    close(sv[1]);
    side(sv[0], 1, rucx, iters, warmup, cpu_a);
    DIE_IF(waitpid(pid, &status, 0) != pid, "waitpid");
    DIE_IF(!WIFEXITED(status) || WEXITSTATUS(status) != 0, "the peer failed");
    return 0;
}
