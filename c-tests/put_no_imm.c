/* Puts issued with UCP_OP_ATTR_FLAG_NO_IMM_CMPL reach the target (LCI saw UCX drop
 * them). The origin puts pieces of many sizes into memory the target allocated through
 * the library and memory it registered: each put must hand back a request even when it
 * could have completed in the call, and must complete once (callback or status). Kinds:
 * with a callback, without one (status polled), with request memory of the application's
 * (UCP_OP_ATTR_FIELD_REQUEST), and a burst whose requests are freed before they complete.
 * After the requests completed and a flush, the target checks every byte of every piece
 * and that the bytes between pieces are untouched. */
#include "common.h"
#include <poll.h>

static ucp_context_h ctx;
static ucp_worker_h worker;
static ucp_ep_h ep;

enum { LEN = 4 << 20, KINDS = 4, BURST = 64, UNTOUCHED = 0x5a };

typedef struct {
    uint64_t addr[2];
    size_t key_len[2];
} layout_t;

typedef struct {
    size_t off, len;
    unsigned seed;
} piece_t;

static const size_t sizes[] = {1, 7, 8, 64, 100, 255, 256, 4096, 8193, 65536, 300000};
enum { NSIZES = sizeof(sizes) / sizeof(sizes[0]) };
enum { NPIECES = KINDS * NSIZES + BURST };

/* Where each put goes: both sides compute the same table; a gap of 64 bytes after each
 * piece must stay untouched. */
static size_t pieces(piece_t *p)
{
    size_t n = 0, off = 0;
    for (int k = 0; k < KINDS; k++) {
        for (int s = 0; s < NSIZES; s++) {
            p[n] = (piece_t){off, sizes[s], 100 + (unsigned)n};
            off += sizes[s] + 64;
            n++;
        }
    }
    for (int b = 0; b < BURST; b++) {
        p[n] = (piece_t){off, 1 + (size_t)b * 97, 100 + (unsigned)n};
        off += p[n].len + 64;
        n++;
    }
    CHECK(off <= LEN, "pieces exceed the region");
    return n;
}

static void setup(int fd)
{
    connect_peer(fd, UCP_FEATURE_RMA, &ctx, &worker, &ep);
}

/* Target: maps two regions, publishes their keys, serves until the origin is done, then
 * checks every byte. */
static int target(int fd)
{
    ucp_mem_map_params_t mp;
    ucp_mem_h mem[2];
    ucp_mem_attr_t attr;
    void *kbuf[2];
    layout_t lay;
    unsigned char *reg = aligned_alloc(4096, LEN), *base[2];
    piece_t p[NPIECES];
    struct pollfd pfd = {fd, POLLIN, 0};
    size_t n = pieces(p), bad;
    char c;

    setup(fd);
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.length     = LEN;
    mp.flags      = UCP_MEM_MAP_ALLOCATE;
    CHECK_OK(ucp_mem_map(ctx, &mp, &mem[0]));
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    CHECK_OK(ucp_mem_query(mem[0], &attr));
    CHECK(attr.length >= LEN && attr.address != NULL, "mem_query");
    base[0] = attr.address;
    base[1] = reg;
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address    = reg;
    CHECK_OK(ucp_mem_map(ctx, &mp, &mem[1]));
    for (int r = 0; r < 2; r++) {
        memset(base[r], UNTOUCHED, LEN);
        CHECK_OK(ucp_rkey_pack(ctx, mem[r], &kbuf[r], &lay.key_len[r]));
        lay.addr[r] = (uintptr_t)base[r];
    }
    full_write(fd, &lay, sizeof(lay));
    for (int r = 0; r < 2; r++) {
        full_write(fd, kbuf[r], lay.key_len[r]);
        ucp_rkey_buffer_release(kbuf[r]);
    }
    /* emulated accesses need our progress */
    while (poll(&pfd, 1, 0) != 1) {
        ucp_worker_progress(worker);
    }
    full_read(fd, &c, 1);
    for (int r = 0; r < 2; r++) {
        size_t end = 0;
        for (size_t i = 0; i < n; i++) {
            bad = verify(base[r] + p[i].off, p[i].len, p[i].seed + 1000 * (unsigned)r);
            CHECK(bad == 0, "region %d piece %zu (%zu bytes): byte %zu differs", r, i, p[i].len,
                  bad - 1);
            for (size_t g = p[i].off + p[i].len; g < p[i].off + p[i].len + 64; g++) {
                CHECK(base[r][g] == UNTOUCHED, "region %d: byte %zu after piece %zu written", r,
                      g, i);
            }
            end = p[i].off + p[i].len + 64;
        }
        for (size_t g = end; g < LEN; g++) {
            CHECK(base[r][g] == UNTOUCHED, "region %d: byte %zu written", r, g);
        }
    }
    barrier(fd);
    CHECK_OK(ucp_mem_unmap(ctx, mem[0]));
    CHECK_OK(ucp_mem_unmap(ctx, mem[1]));
    ucp_ep_destroy(ep);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    free(reg);
    printf("[%d] put_no_imm target passed: %zu pieces in 2 regions\n", (int)getpid(), n);
    return 0;
}

static int completions;

static void put_cb(void *req, ucs_status_t status, void *user_data)
{
    CHECK_OK(status);
    CHECK(user_data == &completions, "user data");
    completions++;
    (void)req;
}

/* A request handed back although the operation may have completed in the call. */
static void *must_be_request(void *r, const char *what, size_t len)
{
    CHECK(r != NULL, "%s of %zu bytes: NULL (completed in the call) despite NO_IMM_CMPL", what,
          len);
    CHECK(!UCS_PTR_IS_ERR(r), "%s of %zu bytes: %s", what, len,
          ucs_status_string(UCS_PTR_STATUS(r)));
    return r;
}

static void origin_region(uint64_t base, ucp_rkey_h rkey, int r, const piece_t *p, void *own)
{
    ucp_request_param_t prm;
    unsigned char *src[NPIECES];
    void *burst[BURST];
    size_t i = 0;
    ucs_status_t st;
    int before;

    for (size_t k = 0; k < NPIECES; k++) {
        src[k] = malloc(p[k].len);
        fill(src[k], p[k].len, p[k].seed + 1000 * (unsigned)r);
    }
    /* with a callback: it runs once, from progress or before the call returns */
    for (int s = 0; s < NSIZES; s++, i++) {
        memset(&prm, 0, sizeof(prm));
        prm.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL | UCP_OP_ATTR_FIELD_CALLBACK |
                           UCP_OP_ATTR_FIELD_USER_DATA;
        prm.cb.send   = put_cb;
        prm.user_data = &completions;
        before        = completions;
        void *q = must_be_request(
            ucp_put_nbx(ep, src[i], p[i].len, base + p[i].off, rkey, &prm), "put with callback",
            p[i].len);
        while ((st = ucp_request_check_status(q)) == UCS_INPROGRESS) {
            ucp_worker_progress(worker);
        }
        CHECK_OK(st);
        /* the callback may follow the status by a progress call at most */
        ucp_worker_progress(worker);
        CHECK(completions == before + 1, "callback ran %d times", completions - before);
        ucp_request_free(q);
    }
    /* no callback: the status is polled */
    for (int s = 0; s < NSIZES; s++, i++) {
        memset(&prm, 0, sizeof(prm));
        prm.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
        void *q = must_be_request(ucp_put_nbx(ep, src[i], p[i].len, base + p[i].off, rkey, &prm),
                                  "put", p[i].len);
        CHECK_OK(wait_and_free(worker, q));
    }
    /* the application's request: the call hands back that very request */
    for (int s = 0; s < NSIZES; s++, i++) {
        memset(&prm, 0, sizeof(prm));
        prm.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL | UCP_OP_ATTR_FIELD_REQUEST;
        prm.request      = own;
        void *q = must_be_request(ucp_put_nbx(ep, src[i], p[i].len, base + p[i].off, rkey, &prm),
                                  "put into the application's request", p[i].len);
        CHECK(q == own, "another request than the application's");
        while ((st = ucp_request_check_status(q)) == UCS_INPROGRESS) {
            ucp_worker_progress(worker);
        }
        CHECK_OK(st);
        /* the application's request memory is reused after completion */
    }
    /* a blocking flush after each put instead of waiting for it (the request is freed at
     * once; the library completes it on its own) */
    for (int s = 0; s < NSIZES; s++, i++) {
        memset(&prm, 0, sizeof(prm));
        prm.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
        ucp_request_free(must_be_request(
            ucp_put_nbx(ep, src[i], p[i].len, base + p[i].off, rkey, &prm), "put", p[i].len));
        memset(&prm, 0, sizeof(prm));
        CHECK_OK(wait_and_free(worker, ucp_ep_flush_nbx(ep, &prm)));
    }
    /* a burst with callbacks, all in flight at once, then waited for */
    before = completions;
    for (int b = 0; b < BURST; b++, i++) {
        memset(&prm, 0, sizeof(prm));
        prm.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL | UCP_OP_ATTR_FIELD_CALLBACK |
                           UCP_OP_ATTR_FIELD_USER_DATA;
        prm.cb.send   = put_cb;
        prm.user_data = &completions;
        burst[b] = must_be_request(ucp_put_nbx(ep, src[i], p[i].len, base + p[i].off, rkey, &prm),
                                   "put in a burst", p[i].len);
    }
    for (int b = 0; b < BURST; b++) {
        while ((st = ucp_request_check_status(burst[b])) == UCS_INPROGRESS) {
            ucp_worker_progress(worker);
        }
        CHECK_OK(st);
        ucp_request_free(burst[b]);
    }
    ucp_worker_progress(worker);
    CHECK(completions == before + BURST, "burst: %d callbacks for %d puts",
          completions - before, BURST);
    CHECK(i == NPIECES, "pieces issued %zu", i);
    for (size_t k = 0; k < NPIECES; k++) {
        free(src[k]);
    }
}

static int origin(int fd)
{
    layout_t lay;
    ucp_rkey_h rkey[2];
    ucp_request_param_t prm;
    piece_t p[NPIECES];
    ucp_context_attr_t cattr;
    char *own;
    char c = 'd';

    pieces(p);
    setup(fd);
    /* the request memory of the application: request_size bytes before the handle */
    cattr.field_mask = UCP_ATTR_FIELD_REQUEST_SIZE;
    CHECK_OK(ucp_context_query(ctx, &cattr));
    own = calloc(1, cattr.request_size + 64);
    full_read(fd, &lay, sizeof(lay));
    for (int r = 0; r < 2; r++) {
        void *k = malloc(lay.key_len[r]);
        full_read(fd, k, lay.key_len[r]);
        CHECK_OK(ucp_ep_rkey_unpack(ep, k, &rkey[r]));
        free(k);
    }
    for (int r = 0; r < 2; r++) {
        origin_region(lay.addr[r], rkey[r], r, p, own + cattr.request_size);
    }
    memset(&prm, 0, sizeof(prm));
    CHECK_OK(wait_and_free(worker, ucp_ep_flush_nbx(ep, &prm)));
    full_write(fd, &c, 1);
    barrier(fd);
    ucp_rkey_destroy(rkey[0]);
    ucp_rkey_destroy(rkey[1]);
    ucp_ep_destroy(ep);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    free(own);
    printf("[%d] put_no_imm origin passed: %d callbacks\n", (int)getpid(), completions);
    return 0;
}

int main(void)
{
    return run_pair(origin, target);
}
