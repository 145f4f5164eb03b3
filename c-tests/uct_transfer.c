/* Two processes (this one and a forked child) open the same UCT transport through UCX's
 * uct.h API (built against Debian's headers, run on rucx's library), connect endpoints
 * to each other's interface, and check every byte of: short/bcopy/zcopy active messages,
 * short/bcopy/zcopy puts, bcopy/zcopy gets and atomics, as far as the interface reports
 * the capability. Addresses, keys and barriers go over a socketpair.
 *
 *   uct_transfer <tl_name> <dev_name>
 *
 * Prints "checked <what>" lines and "UCT TEST SUCCESS" at the end; exits non-zero on the
 * first mismatch. Every wait is bounded (10 s). */
#include <uct/api/uct.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define AM_ID      7
#define BUF_SIZE   (64 * 1024)
#define ROUNDS     20
#define ATOMIC_OFF 60000

#define FAIL(...) do { fprintf(stderr, "[rank %d] ", rank); fprintf(stderr, __VA_ARGS__); \
                       fprintf(stderr, "\n"); exit(1); } while (0)
#define CHECK(st, what) do { ucs_status_t _s = (st); \
                             if (_s != UCS_OK) FAIL("%s: %s", what, ucs_status_string(_s)); } while (0)

static int rank;
static int oob;
static uct_worker_h worker;
static uct_iface_h iface;
static uct_iface_attr_t attr;

/* What the AM handler saw last. */
static volatile int am_count;
static unsigned char am_data[BUF_SIZE];
static size_t am_len;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static ucs_status_t am_handler(void *arg, void *data, size_t length, unsigned flags)
{
    if (length > sizeof(am_data)) {
        FAIL("message of %zu bytes", length);
    }
    if (flags & UCT_CB_PARAM_FLAG_DESC) {
        FAIL("unexpected descriptor flag");
    }
    memcpy(am_data, data, length);
    am_len = length;
    am_count++;
    (void)arg;
    return UCS_OK;
}

static unsigned char pattern(int seed, size_t i)
{
    return (unsigned char)(seed * 31 + i * 7 + (i >> 8));
}

static void fill(void *p, int seed, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) {
        ((unsigned char*)p)[i] = pattern(seed, i);
    }
}

static void expect(const void *p, int seed, size_t n, const char *what)
{
    size_t i;
    for (i = 0; i < n; i++) {
        if (((const unsigned char*)p)[i] != pattern(seed, i)) {
            FAIL("%s: byte %zu is %d, want %d", what, i, ((const unsigned char*)p)[i],
                 pattern(seed, i));
        }
    }
}

static void oob_send(const void *p, size_t n)
{
    if (write(oob, p, n) != (ssize_t)n) FAIL("oob write");
}

static void oob_recv(void *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(oob, (char*)p + got, n - got);
        if (r <= 0) FAIL("oob read");
        got += r;
    }
}

/* Waits for the peer's byte while progressing. */
static void barrier(void)
{
    char c = 'b';
    double t0 = now();
    struct pollfd pfd = { .fd = oob, .events = POLLIN };
    oob_send(&c, 1);
    for (;;) {
        uct_worker_progress(worker);
        if (poll(&pfd, 1, 0) == 1) break;
        if (now() - t0 > 10) FAIL("barrier timed out");
    }
    oob_recv(&c, 1);
}

static void wait_am(int count, const char *what)
{
    double t0 = now();
    while (am_count < count) {
        uct_worker_progress(worker);
        if (now() - t0 > 10) FAIL("%s: timed out waiting for message %d", what, count);
    }
}

static void flush_ep(uct_ep_h ep)
{
    ucs_status_t s;
    double t0 = now();
    do {
        s = uct_ep_flush(ep, 0, NULL);
        uct_worker_progress(worker);
        if (now() - t0 > 10) FAIL("flush timed out");
    } while (s == UCS_INPROGRESS || s == UCS_ERR_NO_RESOURCE);
    CHECK(s, "uct_ep_flush");
    t0 = now();
    do {
        s = uct_iface_flush(iface, 0, NULL);
        uct_worker_progress(worker);
        if (now() - t0 > 10) FAIL("iface flush timed out");
    } while (s == UCS_INPROGRESS);
    CHECK(s, "uct_iface_flush");
}

/* Retries an operation while it says NO_RESOURCE. */
#define RETRY(expr, what) do { ucs_status_t _r; double _t0 = now(); \
        while ((_r = (expr)) == UCS_ERR_NO_RESOURCE) { uct_worker_progress(worker); \
            if (now() - _t0 > 10) FAIL("%s: no resource for 10 s", what); } \
        if (_r != UCS_OK && _r != UCS_INPROGRESS) FAIL("%s: %s", what, ucs_status_string(_r)); \
    } while (0)

struct pack_arg { const void *src; size_t len; };

static size_t pack_cb(void *dest, void *arg)
{
    struct pack_arg *a = arg;
    memcpy(dest, a->src, a->len);
    return a->len;
}

static void unpack_cb(void *arg, const void *data, size_t length)
{
    memcpy(arg, data, length);
}

static ssize_t bcopy_retry(uct_ep_h ep, struct pack_arg *pa, int put, uint64_t addr,
                           uct_rkey_t rkey)
{
    ssize_t n;
    double t0 = now();
    for (;;) {
        n = put ? uct_ep_put_bcopy(ep, pack_cb, pa, addr, rkey)
                : uct_ep_am_bcopy(ep, AM_ID, pack_cb, pa, 0);
        if (n != UCS_ERR_NO_RESOURCE) return n;
        uct_worker_progress(worker);
        if (now() - t0 > 10) FAIL("bcopy: no resource for 10 s");
    }
}

struct peer_info {
    uint64_t recv_buffer;
    size_t   rkey_size, dev_len, iface_len;
    unsigned char blob[1024];
};

int main(int argc, char **argv)
{
    const char *tl, *dev;
    uct_component_h *comps, comp = NULL;
    unsigned ncomps, c, m, t, ntl;
    uct_md_h md = NULL;
    uct_md_attr_t md_attr;
    uct_md_config_t *md_config;
    uct_iface_config_t *iface_config;
    uct_tl_resource_desc_t *tls;
    uct_allocated_memory_t mem, src;
    struct peer_info mine, theirs;
    uct_rkey_bundle_t rkey;
    uct_ep_params_t ep_params;
    uct_ep_h ep;
    int sv[2], i, status = 0, expected = 0;
    pid_t child;
    uint64_t flags;
    unsigned char *buf, *sbuf, tmp[BUF_SIZE];

    if (argc != 3) {
        fprintf(stderr, "usage: %s <tl> <dev>\n", argv[0]);
        return 2;
    }
    tl  = argv[1];
    dev = argv[2];
    setvbuf(stdout, NULL, _IOLBF, 0);

    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return 2;
    child = fork();
    if (child < 0) return 2;
    rank = child == 0;
    oob  = sv[rank];
    close(sv[1 - rank]);
    if (rank == 1) alarm(60);

    CHECK(uct_worker_create(NULL, UCS_THREAD_MODE_SINGLE, &worker), "uct_worker_create");
    CHECK(uct_query_components(&comps, &ncomps), "uct_query_components");
    for (c = 0; c < ncomps && md == NULL; c++) {
        uct_component_attr_t ca;
        ca.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT |
                        UCT_COMPONENT_ATTR_FIELD_NAME;
        CHECK(uct_component_query(comps[c], &ca), "uct_component_query");
        uct_md_resource_desc_t res[ca.md_resource_count];
        ca.field_mask   = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
        ca.md_resources = res;
        CHECK(uct_component_query(comps[c], &ca), "uct_component_query");
        for (m = 0; m < ca.md_resource_count && md == NULL; m++) {
            uct_md_h cand;
            CHECK(uct_md_config_read(comps[c], NULL, NULL, &md_config), "uct_md_config_read");
            CHECK(uct_md_open(comps[c], res[m].md_name, md_config, &cand), "uct_md_open");
            uct_config_release(md_config);
            CHECK(uct_md_query_tl_resources(cand, &tls, &ntl), "uct_md_query_tl_resources");
            for (t = 0; t < ntl; t++) {
                if (!strcmp(tls[t].tl_name, tl) && !strcmp(tls[t].dev_name, dev)) {
                    md   = cand;
                    comp = comps[c];
                }
            }
            uct_release_tl_resource_list(tls);
            if (md == NULL) uct_md_close(cand);
        }
    }
    uct_release_component_list(comps);
    if (md == NULL) FAIL("no transport %s on device %s", tl, dev);

    CHECK(uct_md_iface_config_read(md, tl, NULL, NULL, &iface_config), "iface_config_read");
    uct_iface_params_t params;
    memset(&params, 0, sizeof(params));
    params.field_mask           = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                                  UCT_IFACE_PARAM_FIELD_DEVICE;
    params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name  = tl;
    params.mode.device.dev_name = dev;
    CHECK(uct_iface_open(md, worker, &params, iface_config, &iface), "uct_iface_open");
    uct_config_release(iface_config);
    CHECK(uct_iface_query(iface, &attr), "uct_iface_query");
    CHECK(uct_md_query(md, &md_attr), "uct_md_query");
    CHECK(uct_iface_set_am_handler(iface, AM_ID, am_handler, NULL, 0), "set_am_handler");
    uct_iface_progress_enable(iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    flags = attr.cap.flags;
    if (!(flags & UCT_IFACE_FLAG_CONNECT_TO_IFACE)) FAIL("cannot connect to an interface");

    CHECK(uct_iface_mem_alloc(iface, BUF_SIZE, UCT_MD_MEM_ACCESS_ALL, "test", &mem),
          "uct_iface_mem_alloc");
    CHECK(uct_iface_mem_alloc(iface, BUF_SIZE, UCT_MD_MEM_ACCESS_ALL, "src", &src),
          "uct_iface_mem_alloc");
    buf  = mem.address;
    sbuf = src.address;
    memset(buf, 0, BUF_SIZE);

    /* Exchange: receive buffer address, packed key, device and interface addresses. */
    memset(&mine, 0, sizeof(mine));
    mine.recv_buffer = (uintptr_t)buf;
    mine.rkey_size   = md_attr.rkey_packed_size;
    mine.dev_len     = attr.device_addr_len;
    mine.iface_len   = attr.iface_addr_len;
    if (mine.rkey_size + mine.dev_len + mine.iface_len > sizeof(mine.blob)) FAIL("blob");
    CHECK(uct_md_mkey_pack(md, mem.memh, mine.blob), "uct_md_mkey_pack");
    CHECK(uct_iface_get_device_address(iface, (uct_device_addr_t*)(mine.blob + mine.rkey_size)),
          "get_device_address");
    CHECK(uct_iface_get_address(iface, (uct_iface_addr_t*)(mine.blob + mine.rkey_size +
                                                           mine.dev_len)), "get_address");
    oob_send(&mine, sizeof(mine));
    oob_recv(&theirs, sizeof(theirs));
    {
        const uct_device_addr_t *da = (void*)(theirs.blob + theirs.rkey_size);
        const uct_iface_addr_t *ia  = (void*)(theirs.blob + theirs.rkey_size + theirs.dev_len);
        if (!uct_iface_is_reachable(iface, da, ia)) FAIL("peer unreachable");
        CHECK(uct_rkey_unpack(comp, theirs.blob, &rkey), "uct_rkey_unpack");
        ep_params.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR |
                               UCT_EP_PARAM_FIELD_IFACE_ADDR;
        ep_params.iface      = iface;
        ep_params.dev_addr   = da;
        ep_params.iface_addr = ia;
        CHECK(uct_ep_create(&ep_params, &ep), "uct_ep_create");
    }
    barrier();

    /* ---- active messages: rank 0 sends, rank 1 checks and echoes ---- */
    if (flags & UCT_IFACE_FLAG_AM_SHORT) {
        size_t len = attr.cap.am.max_short - 8;
        if (len > 200) len = 200;
        for (i = 0; i < ROUNDS; i++) {
            uint64_t hdr = 0x1122334455667700ull + i;
            if (rank == 0) {
                fill(tmp, i, len);
                RETRY(uct_ep_am_short(ep, AM_ID, hdr, tmp, len), "am_short");
                wait_am(++expected, "am_short echo");
            } else {
                wait_am(++expected, "am_short");
                RETRY(uct_ep_am_short(ep, AM_ID, hdr, NULL, 0), "am_short echo");
            }
            if (am_len != 8 + (rank == 0 ? 0 : len) || memcmp(am_data, &hdr, 8))
                FAIL("am_short %d: %zu bytes, header mismatch", i, am_len);
            if (rank == 1) expect(am_data + 8, i, len, "am_short payload");
        }
        printf("checked am_short\n");
    }
    if (flags & UCT_IFACE_FLAG_AM_BCOPY) {
        size_t len = attr.cap.am.max_bcopy < 5000 ? attr.cap.am.max_bcopy : 5000;
        for (i = 0; i < ROUNDS; i++) {
            struct pack_arg pa = { tmp, len };
            fill(tmp, 100 + i, len);
            if (rank == 0) {
                if (bcopy_retry(ep, &pa, 0, 0, 0) != (ssize_t)len) FAIL("am_bcopy length");
                wait_am(++expected, "am_bcopy echo");
            } else {
                wait_am(++expected, "am_bcopy");
                if (bcopy_retry(ep, &pa, 0, 0, 0) != (ssize_t)len) FAIL("am_bcopy length");
            }
            if (am_len != len) FAIL("am_bcopy: %zu bytes, want %zu", am_len, len);
            expect(am_data, 100 + i, len, "am_bcopy");
        }
        printf("checked am_bcopy\n");
    }
    if (flags & UCT_IFACE_FLAG_AM_ZCOPY) {
        size_t hlen = attr.cap.am.max_hdr < 16 ? attr.cap.am.max_hdr : 16;
        size_t len = 3000;
        uct_iov_t iov[2];
        if (len + hlen > attr.cap.am.max_zcopy) len = attr.cap.am.max_zcopy - hlen;
        fill(sbuf, 7, hlen + len);
        iov[0].buffer = sbuf + hlen;           iov[0].length = len / 2;
        iov[1].buffer = sbuf + hlen + len / 2; iov[1].length = len - len / 2;
        for (i = 0; i < 2; i++) {
            iov[i].memh = src.memh; iov[i].stride = 0; iov[i].count = 1;
        }
        for (i = 0; i < ROUNDS; i++) {
            if (rank == 0) {
                RETRY(uct_ep_am_zcopy(ep, AM_ID, sbuf, hlen, iov, 2, 0, NULL), "am_zcopy");
                wait_am(++expected, "am_zcopy echo");
            } else {
                wait_am(++expected, "am_zcopy");
                RETRY(uct_ep_am_zcopy(ep, AM_ID, sbuf, hlen, iov, 2, 0, NULL), "am_zcopy");
            }
            if (am_len != hlen + len) FAIL("am_zcopy: %zu bytes", am_len);
            expect(am_data, 7, hlen + len, "am_zcopy");
        }
        printf("checked am_zcopy\n");
    }
    flush_ep(ep);
    barrier();

    /* ---- puts: rank 0 writes into rank 1's buffer; rank 1 checks after a barrier ---- */
    if (flags & UCT_IFACE_FLAG_PUT_SHORT) {
        size_t len = attr.cap.put.max_short < 200 ? attr.cap.put.max_short : 200;
        if (rank == 0) {
            fill(tmp, 11, len);
            RETRY(uct_ep_put_short(ep, tmp, len, theirs.recv_buffer + 100, rkey.rkey), "put_short");
            flush_ep(ep);
        }
        barrier();
        if (rank == 1) expect(buf + 100, 11, len, "put_short");
        printf("checked put_short\n");
    }
    if (flags & UCT_IFACE_FLAG_PUT_BCOPY) {
        size_t len = attr.cap.put.max_bcopy < 4000 ? attr.cap.put.max_bcopy : 4000;
        if (rank == 0) {
            struct pack_arg pa = { tmp, len };
            fill(tmp, 12, len);
            if (bcopy_retry(ep, &pa, 1, theirs.recv_buffer + 1000, rkey.rkey) != (ssize_t)len)
                FAIL("put_bcopy length");
            flush_ep(ep);
        }
        barrier();
        if (rank == 1) expect(buf + 1000, 12, len, "put_bcopy");
        printf("checked put_bcopy\n");
    }
    if (flags & UCT_IFACE_FLAG_PUT_ZCOPY) {
        size_t len = 20000;
        uct_iov_t iov[2];
        if (len > attr.cap.put.max_zcopy) len = attr.cap.put.max_zcopy;
        fill(sbuf, 13, len);
        iov[0].buffer = sbuf;           iov[0].length = len / 3;
        iov[1].buffer = sbuf + len / 3; iov[1].length = len - len / 3;
        for (i = 0; i < 2; i++) {
            iov[i].memh = src.memh; iov[i].stride = 0; iov[i].count = 1;
        }
        if (rank == 0) {
            RETRY(uct_ep_put_zcopy(ep, iov, 2, theirs.recv_buffer + 8000, rkey.rkey, NULL),
                  "put_zcopy");
            flush_ep(ep);
            /* Over connection-based transports the data lands when the target progresses:
             * the barrier progresses both sides. */
        }
        barrier();
        if (rank == 1) {
            double t0 = now();
            while (memcmp(buf + 8000 + len - 1, sbuf + len - 1, 1) && now() - t0 < 10) {
                uct_worker_progress(worker);
            }
            expect(buf + 8000, 13, len, "put_zcopy");
        }
        printf("checked put_zcopy\n");
    }
    barrier();

    /* ---- gets: rank 1 fills its buffer; rank 0 reads it ---- */
    if (flags & (UCT_IFACE_FLAG_GET_BCOPY | UCT_IFACE_FLAG_GET_ZCOPY)) {
        if (rank == 1) fill(buf + 30000, 14, 20000);
        barrier();
        if (rank == 0 && (flags & UCT_IFACE_FLAG_GET_BCOPY)) {
            size_t len = attr.cap.get.max_bcopy < 4000 ? attr.cap.get.max_bcopy : 4000;
            memset(tmp, 0, len);
            RETRY(uct_ep_get_bcopy(ep, unpack_cb, tmp, len, theirs.recv_buffer + 30000,
                                   rkey.rkey, NULL), "get_bcopy");
            flush_ep(ep);
            expect(tmp, 14, len, "get_bcopy");
            printf("checked get_bcopy\n");
        }
        if (rank == 0 && (flags & UCT_IFACE_FLAG_GET_ZCOPY)) {
            uct_iov_t iov;
            memset(sbuf, 0, 20000);
            iov.buffer = sbuf; iov.length = 20000; iov.memh = src.memh;
            iov.stride = 0; iov.count = 1;
            RETRY(uct_ep_get_zcopy(ep, &iov, 1, theirs.recv_buffer + 30000, rkey.rkey, NULL),
                  "get_zcopy");
            flush_ep(ep);
            expect(sbuf, 14, 20000, "get_zcopy");
            printf("checked get_zcopy\n");
        }
        barrier();
    }

    /* ---- atomics on rank 1's buffer ---- */
    if ((flags & UCT_IFACE_FLAG_ATOMIC_CPU) &&
        (attr.cap.atomic64.fop_flags & UCS_BIT(UCT_ATOMIC_OP_CSWAP))) {
        uint64_t *target = (uint64_t*)(buf + ATOMIC_OFF);
        uint64_t remote = theirs.recv_buffer + ATOMIC_OFF, old = 0;
        uint32_t old32 = 0;
        if (rank == 1) { target[0] = 1000; target[1] = 0; }
        barrier();
        if (rank == 0) {
            RETRY(uct_ep_atomic64_post(ep, UCT_ATOMIC_OP_ADD, 5, remote, rkey.rkey), "add64");
            RETRY(uct_ep_atomic64_fetch(ep, UCT_ATOMIC_OP_ADD, 10, &old, remote, rkey.rkey,
                                        NULL), "fadd64");
            if (old != 1005) FAIL("fetch-add returned %lu, want 1005", (unsigned long)old);
            RETRY(uct_ep_atomic_cswap64(ep, 1015, 7, remote, rkey.rkey, &old, NULL), "cswap64");
            if (old != 1015) FAIL("cswap returned %lu, want 1015", (unsigned long)old);
            RETRY(uct_ep_atomic32_fetch(ep, UCT_ATOMIC_OP_SWAP, 9, &old32, remote + 8,
                                        rkey.rkey, NULL), "swap32");
            if (old32 != 0) FAIL("swap32 returned %u, want 0", old32);
            flush_ep(ep);
        }
        barrier();
        if (rank == 1) {
            if (target[0] != 7) FAIL("atomic target is %lu, want 7", (unsigned long)target[0]);
            if (*(uint32_t*)&target[1] != 9) FAIL("swap32 target");
        }
        printf("checked atomics\n");
    }

    /* ---- an unsupported operation says so ---- */
    if (uct_ep_tag_eager_short(ep, 1, tmp, 8) != UCS_ERR_UNSUPPORTED) FAIL("tag offload");

    flush_ep(ep);
    barrier();
    uct_ep_destroy(ep);
    CHECK(uct_rkey_release(comp, &rkey), "uct_rkey_release");
    uct_iface_mem_free(&mem);
    uct_iface_mem_free(&src);
    uct_iface_progress_disable(iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    uct_iface_close(iface);
    uct_md_close(md);
    uct_worker_destroy(worker);

    if (rank == 1) return 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status)) {
        FAIL("child failed (status %d)", status);
    }
    printf("UCT TEST SUCCESS %s/%s\n", tl, dev);
    return 0;
}
