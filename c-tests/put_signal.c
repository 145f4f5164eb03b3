/* rucx_put_signal_nbx (<rucx/ucp_ext.h>) between two processes: the target waits for its
 * signal word (acquire loads while it progresses) and then checks every byte of the data,
 * round after round with a new pattern, on allocated memory (mapped) and registered memory
 * (CMA or emulated), add and set, nbx with and without callback, request memory of the
 * caller and NO_IMM_CMPL; bad input (misaligned word, out of range, unknown op) fails with
 * UCS_ERR_INVALID_PARAM and changes nothing. */
#include "common.h"
#include <rucx/ucp_ext.h>
#include <poll.h>

static ucp_context_h ctx;
static ucp_worker_h worker;
static ucp_ep_h ep;

enum { LEN = (1 << 20) + 8192, SIG_OFF = (1 << 20) + 4096, ROUNDS_PER_REGION = 24 };

static const size_t sizes[] = {1, 8, 63, 4096, 100000, 1 << 20};

typedef struct {
    uint64_t base[2];
    size_t key_len[2];
} layout_t;

/* One round's order; size == UINT64_MAX ends the run. */
/* region: the signal word's region; cross: the data goes to the other region (two keys) */
typedef struct {
    uint64_t region, want, off, size, seed, cross;
} order_t;

static uint64_t load_acquire(const void *p)
{
    return __atomic_load_n((const uint64_t*)p, __ATOMIC_ACQUIRE);
}

/* Waits (blocking) until the origin writes to fd, serving our worker meanwhile: the
 * origin's requests complete only with our answers on emulated paths. */
static void serve_until_readable(int fd)
{
    int efd;
    CHECK_OK(ucp_worker_get_efd(worker, &efd));
    for (;;) {
        struct pollfd pfd[2] = {{fd, POLLIN, 0}, {efd, POLLIN, 0}};
        while (ucp_worker_progress(worker) != 0) {
        }
        if (poll(pfd, 1, 0) == 1) {
            return;
        }
        if (ucp_worker_arm(worker) == UCS_OK) {
            /* bounded, in case an event slipped past the arm */
            (void)poll(pfd, 2, 100);
        }
    }
}

static int target(int fd)
{
    ucp_mem_map_params_t mp;
    ucp_mem_h h[2];
    ucp_mem_attr_t attr;
    layout_t lay;
    void *kbuf[2];
    char *base[2], *reg = aligned_alloc(4096, LEN), *want_data = malloc(LEN);
    order_t o;

    connect_peer(fd, UCP_FEATURE_RMA | UCP_FEATURE_AMO64 | UCP_FEATURE_WAKEUP, &ctx, &worker,
                 &ep);
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.length     = LEN;
    mp.flags      = UCP_MEM_MAP_ALLOCATE;
    CHECK_OK(ucp_mem_map(ctx, &mp, &h[0]));
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
    CHECK_OK(ucp_mem_query(h[0], &attr));
    base[0] = attr.address;
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address    = reg;
    CHECK_OK(ucp_mem_map(ctx, &mp, &h[1]));
    base[1] = reg;
    for (int i = 0; i < 2; i++) {
        memset(base[i], 0, LEN);
        CHECK_OK(ucp_rkey_pack(ctx, h[i], &kbuf[i], &lay.key_len[i]));
        lay.base[i] = (uintptr_t)base[i];
    }
    full_write(fd, &lay, sizeof(lay));
    for (int i = 0; i < 2; i++) {
        full_write(fd, kbuf[i], lay.key_len[i]);
        ucp_rkey_buffer_release(kbuf[i]);
    }

    for (;;) {
        char *sig, *data, c;
        size_t bad;
        serve_until_readable(fd);
        full_read(fd, &o, sizeof(o));
        if (o.size == UINT64_MAX) {
            break;
        }
        sig  = base[o.region] + SIG_OFF;
        data = base[o.region ^ o.cross] + o.off;
        fill(want_data, o.size, (unsigned)o.seed);
        CHECK(load_acquire(sig) != o.want, "signalled before the put (round seed %llu)",
              (unsigned long long)o.seed);
        c = 'r';
        full_write(fd, &c, 1);
        /* spin: the origin only waits for us meanwhile */
        while (load_acquire(sig) != o.want) {
            ucp_worker_progress(worker);
        }
        /* both ends and the middle first: a copy still running cannot stay ahead */
        bad = 0;
        if (data[0] != want_data[0] || data[o.size / 2] != want_data[o.size / 2] ||
            data[o.size - 1] != want_data[o.size - 1]) {
            bad = 1;
        } else if (memcmp(data, want_data, o.size) != 0) {
            bad = 2;
        }
        c = bad ? 'x' : 'k';
        full_write(fd, &c, 1);
    }
    /* serve emulated accesses until the origin is done with the error cases */
    {
        char c;
        serve_until_readable(fd);
        full_read(fd, &c, 1);
        for (int i = 0; i < 2; i++) {
            /* the refused calls left the word alone */
            CHECK(*(volatile uint64_t*)(base[i] + SIG_OFF + 8) == 0, "refused call signalled");
        }
        full_write(fd, &c, 1);
        serve_until_readable(fd);
        full_read(fd, &c, 1);
    }
    for (int i = 0; i < 2; i++) {
        CHECK_OK(ucp_mem_unmap(ctx, h[i]));
    }
    ucp_ep_destroy(ep);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    free(reg);
    free(want_data);
    printf("[%d] put_signal target passed\n", (int)getpid());
    return 0;
}

static int cb_count;
static void *cb_user;

static void send_cb(void *req, ucs_status_t status, void *user_data)
{
    (void)req;
    CHECK_OK(status);
    cb_count++;
    cb_user = user_data;
}

static void flush(void)
{
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    CHECK_OK(wait_and_free(worker, ucp_ep_flush_nbx(ep, &p)));
}

static int origin(int fd)
{
    layout_t lay;
    ucp_rkey_h key[2];
    uint64_t held[2] = {0, 0};
    char *src = malloc(LEN), c;
    unsigned round = 0;
    order_t o;

    connect_peer(fd, UCP_FEATURE_RMA | UCP_FEATURE_AMO64 | UCP_FEATURE_WAKEUP, &ctx, &worker,
                 &ep);
    full_read(fd, &lay, sizeof(lay));
    for (int i = 0; i < 2; i++) {
        void *k = malloc(lay.key_len[i]);
        full_read(fd, k, lay.key_len[i]);
        CHECK_OK(ucp_ep_rkey_unpack(ep, k, &key[i]));
        free(k);
    }

    for (unsigned region = 0; region < 2; region++) {
        for (unsigned r = 0; r < ROUNDS_PER_REGION; r++, round++) {
            ucp_request_param_t p;
            static char reqmem[1024] __attribute__((aligned(64)));
            rucx_signal_op_t op = (r % 2) ? RUCX_SIGNAL_OP_SET : RUCX_SIGNAL_OP_ADD;
            uint64_t value, sig = lay.base[region] + SIG_OFF;
            void *req;
            o.region = region;
            o.size   = sizes[r % (sizeof(sizes) / sizeof(sizes[0]))];
            o.off    = (r * 8 + 3) % 4096;
            o.seed   = 100 + round;
            o.cross  = (r % 3 == 2);
            if (op == RUCX_SIGNAL_OP_ADD) {
                value = round + 1;
                o.want = held[region] + value;
            } else {
                value = ((uint64_t)round << 32) | 0xabcu;
                o.want = value;
            }
            held[region] = o.want;
            fill(src, o.size, (unsigned)o.seed);
            full_write(fd, &o, sizeof(o));
            full_read(fd, &c, 1);
            CHECK(c == 'r', "target not ready");
            memset(&p, 0, sizeof(p));
            switch (r % 4) {
            case 0: /* no parameter at all */
                break;
            case 1: /* callback, user data and the datatype (a call done inside returns
                     * UCS_OK and runs no callback) */
                p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                                 UCP_OP_ATTR_FIELD_DATATYPE;
                p.cb.send      = send_cb;
                p.user_data    = &held[region];
                p.datatype     = ucp_dt_make_contig(1);
                break;
            case 2: /* never complete in the call */
                p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                                 UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
                p.cb.send      = send_cb;
                p.user_data    = src;
                break;
            case 3: /* request memory of ours, bytes as an explicit datatype */
                p.op_attr_mask = UCP_OP_ATTR_FIELD_REQUEST | UCP_OP_ATTR_FIELD_DATATYPE;
                p.request      = reqmem + 512;
                p.datatype     = ucp_dt_make_contig(1);
                break;
            }
            cb_count = 0;
            cb_user  = NULL;
            req = rucx_put_signal_nbx(ep, src, o.size, lay.base[region ^ o.cross] + o.off,
                                      key[region ^ o.cross], sig, key[region], op, value, &p);
            CHECK(!UCS_PTR_IS_ERR(req), "put_signal: %s",
                  ucs_status_string(UCS_PTR_STATUS(req)));
            if (r % 4 == 2) {
                CHECK(req != NULL, "NO_IMM_CMPL completed in the call");
            }
            if (r % 4 == 3) {
                CHECK(req == NULL || req == p.request, "request memory not used");
                while (req != NULL && ucp_request_check_status(req) == UCS_INPROGRESS) {
                    ucp_worker_progress(worker);
                }
                CHECK(req == NULL || ucp_request_check_status(req) == UCS_OK, "status");
            } else {
                CHECK_OK(wait_and_free(worker, req));
            }
            if ((r % 4 == 1 && req != NULL) || r % 4 == 2) {
                CHECK(cb_count == 1, "callback ran %d times", cb_count);
                CHECK(cb_user == p.user_data, "callback's user data");
            } else {
                CHECK(cb_count == 0, "callback of a call done inside ran %d times", cb_count);
            }
            full_read(fd, &c, 1);
            CHECK(c == 'k', "round %u (%s, region %u, %llu bytes): target saw old data", round,
                  op == RUCX_SIGNAL_OP_ADD ? "add" : "set", region,
                  (unsigned long long)o.size);
        }
    }
    o.size = UINT64_MAX;
    full_write(fd, &o, sizeof(o));

    /* refusals: nothing is written, the process goes on */
    for (unsigned region = 0; region < 2; region++) {
        ucp_request_param_t p;
        uint64_t b = lay.base[region], sig = b + SIG_OFF + 8;
        memset(&p, 0, sizeof(p));
        CHECK(UCS_PTR_STATUS(rucx_put_signal_nbx(ep, src, 8, b, key[region], sig + 4,
                                                 key[region], RUCX_SIGNAL_OP_ADD, 1, &p)) ==
                  UCS_ERR_INVALID_PARAM, "misaligned signal word");
        CHECK(UCS_PTR_STATUS(rucx_put_signal_nbx(ep, src, 8, b, key[region], b + LEN - 4,
                                                 key[region], RUCX_SIGNAL_OP_ADD, 1, &p)) ==
                  UCS_ERR_INVALID_PARAM, "signal word past the region");
        CHECK(UCS_PTR_STATUS(rucx_put_signal_nbx(ep, src, 16, b + LEN - 8, key[region], sig,
                                                 key[region], RUCX_SIGNAL_OP_SET, 1, &p)) ==
                  UCS_ERR_INVALID_PARAM, "data past the region");
        CHECK(UCS_PTR_STATUS(rucx_put_signal_nbx(ep, src, 8, b, key[region], sig, key[region],
                                                 (rucx_signal_op_t)7, 1, &p)) ==
                  UCS_ERR_INVALID_PARAM, "unknown op");
        CHECK(UCS_PTR_STATUS(rucx_put_signal_nbx(ep, src, SIZE_MAX, b, key[region], sig,
                                                 key[region], RUCX_SIGNAL_OP_ADD, 1, &p)) ==
                  UCS_ERR_INVALID_PARAM, "a count larger than any memory");
        CHECK(UCS_PTR_STATUS(rucx_put_signal_nbx(ep, src, 8, b, key[region], sig, NULL,
                                                 RUCX_SIGNAL_OP_SET, 1, &p)) ==
                  UCS_ERR_INVALID_PARAM, "no signal key");
        CHECK(UCS_PTR_STATUS(rucx_put_signal_nbx(ep, src, 8, b, key[region], sig, key[region],
                                                 RUCX_SIGNAL_OP_SET, 1, NULL)) ==
                  UCS_ERR_INVALID_PARAM, "no param");
    }
    flush();
    c = 'e';
    full_write(fd, &c, 1);
    full_read(fd, &c, 1);
    for (int i = 0; i < 2; i++) {
        ucp_rkey_destroy(key[i]);
    }
    full_write(fd, &c, 1);
    ucp_ep_destroy(ep);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    free(src);
    printf("[%d] put_signal origin passed\n", (int)getpid());
    return 0;
}

int main(void)
{
    return run_pair(origin, target);
}
