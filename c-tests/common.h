/* Helpers shared by rucx's C tests: address exchange between two processes over a
 * socketpair, a data pattern, and failure reporting. Written against the UCP API only,
 * so the tests build with rucx's headers and with UCX's. */
#ifndef RUCX_CTEST_COMMON_H
#define RUCX_CTEST_COMMON_H

#include <ucp/api/ucp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <sys/prctl.h>
#include <signal.h>

#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "[%d] FAIL %s:%d: %s: ", (int)getpid(), __FILE__, \
                    __LINE__, #cond);                                         \
            fprintf(stderr, __VA_ARGS__);                                     \
            fprintf(stderr, "\n");                                            \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

#define CHECK_OK(st) CHECK((st) == UCS_OK, "status %d (%s)", (int)(st), ucs_status_string(st))

static inline void full_write(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        CHECK(n > 0, "write");
        p += n;
        len -= (size_t)n;
    }
}

static inline void full_read(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        CHECK(n > 0, "read");
        p += n;
        len -= (size_t)n;
    }
}

/* Sends a length-prefixed blob to the peer and receives the peer's. */
static inline void *exchange(int fd, const void *mine, size_t len, size_t *peer_len)
{
    uint64_t l = len, pl;
    void *peer;
    full_write(fd, &l, sizeof(l));
    full_write(fd, mine, len);
    full_read(fd, &pl, sizeof(pl));
    peer = malloc(pl ? pl : 1);
    full_read(fd, peer, pl);
    if (peer_len != NULL) {
        *peer_len = pl;
    }
    return peer;
}

/* Waits until the peer reaches the same point. */
static inline void barrier(int fd)
{
    char c = 'b';
    full_write(fd, &c, 1);
    full_read(fd, &c, 1);
}

/* Creates a context with `features`, a worker and an endpoint to the process at the
 * other end of `fd` (worker addresses are exchanged over it). */
static inline void connect_peer(int fd, uint64_t features, ucp_context_h *ctx,
                                ucp_worker_h *worker, ucp_ep_h *ep)
{
    ucp_params_t params;
    ucp_worker_params_t wparams;
    ucp_ep_params_t eparams;
    ucp_address_t *addr;
    size_t addr_len;
    void *peer;
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features   = features;
    CHECK_OK(ucp_init(&params, NULL, ctx));
    memset(&wparams, 0, sizeof(wparams));
    CHECK_OK(ucp_worker_create(*ctx, &wparams, worker));
    CHECK_OK(ucp_worker_get_address(*worker, &addr, &addr_len));
    peer = exchange(fd, addr, addr_len, NULL);
    ucp_worker_release_address(*worker, addr);
    memset(&eparams, 0, sizeof(eparams));
    eparams.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    eparams.address    = peer;
    CHECK_OK(ucp_ep_create(*worker, &eparams, ep));
    free(peer);
}

/* Progresses `worker` until the operation that returned `r` completes; frees the request
 * and returns its status (UCS_OK for an operation that completed in the call). */
static inline ucs_status_t wait_and_free(ucp_worker_h worker, void *r)
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

static inline unsigned char pattern_byte(size_t i, unsigned seed)
{
    return (unsigned char)((i * 2654435761u + seed * 40503u) >> 7);
}

static inline void fill(void *buf, size_t len, unsigned seed)
{
    unsigned char *p = buf;
    for (size_t i = 0; i < len; i++) {
        p[i] = pattern_byte(i, seed);
    }
}

static inline size_t verify(const void *buf, size_t len, unsigned seed)
{
    const unsigned char *p = buf;
    for (size_t i = 0; i < len; i++) {
        if (p[i] != pattern_byte(i, seed)) {
            return i + 1;
        }
    }
    return 0;
}

static volatile sig_atomic_t child_done, child_status;
static pid_t child_pid;

/* A child that fails ends the parent too (instead of leaving it waiting for a peer). */
static inline void on_sigchld(int sig)
{
    int status;
    (void)sig;
    if (waitpid(child_pid, &status, WNOHANG) == child_pid) {
        child_done   = 1;
        child_status = status;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            static const char msg[] = "peer process failed\n";
            (void)!write(2, msg, sizeof(msg) - 1);
            _exit(1);
        }
    }
}

/* Runs child(fd) in a forked process and parent(fd) here; returns 0 when both pass. */
static inline int run_pair(int (*parent)(int fd), int (*child)(int fd))
{
    int sv[2], status = 0, rc;
    pid_t pid;
    /* which library serves us (the tests check for rucx's version string) */
    printf("library: %s\n", ucp_get_version_string());
    fflush(stdout);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
    child_pid = -1;
    signal(SIGCHLD, on_sigchld);
    pid = fork();
    CHECK(pid >= 0, "fork");
    child_pid = pid;
    if (pid == 0) {
        /* never outlive the parent (a failed parent must not leave a spinning child) */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() == 1) {
            exit(1);
        }
        close(sv[0]);
        exit(child(sv[1]));
    }
    close(sv[1]);
    rc = parent(sv[0]);
    signal(SIGCHLD, SIG_DFL);
    if (child_done) {
        status = child_status;
    } else {
        CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
    }
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed (status %d)", status);
    return rc;
}

#endif
