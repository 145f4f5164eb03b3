/* Packed remote keys fit a fixed 16-byte field: the target packs the keys of memory the
 * library allocated (UCP_MEM_MAP_ALLOCATE), of registered application memory (an odd,
 * unaligned address and a page-aligned one), asserts each is at most 16 bytes, prints
 * the sizes, and sends only the 16-byte fields. The origin unpacks each key from its
 * field (ucp_ep_rkey_unpack gets no length) and puts, gets and runs atomics, checking
 * every byte; the target checks its memory too. A zero-filled field is the empty key
 * (what UCX's key of memory registered with no transport begins with): accesses through
 * it are emulated and checked by the target against everything it mapped. Accesses
 * outside a region fail. */
#include "common.h"

static ucp_context_h ctx;
static ucp_worker_h worker;
static ucp_ep_h ep;

enum { NREG = 3 };

static const size_t lens[NREG] = {65536, 100003, 1 << 20};
static const char *const names[NREG] = {"allocated", "registered (odd address)",
                                        "registered (page-aligned)"};

typedef struct {
    uint64_t addr, len;
    unsigned char key[16]; /* the fixed field a client keeps a packed key in */
} region_t;

static void setup(int fd)
{
    connect_peer(fd, UCP_FEATURE_RMA | UCP_FEATURE_AMO32 | UCP_FEATURE_AMO64, &ctx, &worker,
                 &ep);
}

static ucs_status_t wait_op(void *r)
{
    return wait_and_free(worker, r);
}

static ucs_status_t flush(void)
{
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    return wait_op(ucp_ep_flush_nbx(ep, &p));
}

static void progress_until_peer(int fd)
{
    char c = 0;
    /* the peer writes one byte when it is done; progress meanwhile (emulated accesses
     * are executed by this process) */
    for (;;) {
        ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
        if (n == 1) {
            return;
        }
        CHECK(n < 0, "peer closed");
        ucp_worker_progress(worker);
    }
}

static int target(int fd)
{
    ucp_mem_map_params_t mp;
    ucp_mem_h memh[NREG];
    unsigned char *mem[NREG];
    region_t reg[NREG];
    unsigned char *heap = malloc(lens[1] + 1);
    unsigned char *aligned = aligned_alloc(4096, lens[2]);

    setup(fd);
    for (int i = 0; i < NREG; i++) {
        void *kbuf;
        size_t ksize;
        ucp_mem_attr_t attr;
        memset(&mp, 0, sizeof(mp));
        mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS |
                        UCP_MEM_MAP_PARAM_FIELD_ADDRESS;
        mp.length = lens[i];
        if (i == 0) {
            mp.address = NULL;
            mp.flags   = UCP_MEM_MAP_ALLOCATE;
        } else {
            mp.address = i == 1 ? heap + 1 : aligned;
            mp.flags   = 0;
        }
        CHECK_OK(ucp_mem_map(ctx, &mp, &memh[i]));
        attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
        CHECK_OK(ucp_mem_query(memh[i], &attr));
        CHECK(attr.length >= lens[i], "length %zu", attr.length);
        mem[i] = attr.address;
        memset(mem[i], 0xee, lens[i]);
        CHECK_OK(ucp_rkey_pack(ctx, memh[i], &kbuf, &ksize));
        printf("rkey16: %s memory (%zu bytes): packed key of %zu bytes%s\n", names[i], lens[i],
               ksize, getenv("UCX_TLS") != NULL ? " (UCX_TLS set)" : "");
        CHECK(ksize <= 16, "%s: packed key of %zu bytes", names[i], ksize);
        memset(reg[i].key, 0xa5, sizeof(reg[i].key)); /* bytes past the key: noise */
        memcpy(reg[i].key, kbuf, ksize);
        ucp_rkey_buffer_release(kbuf);
        reg[i].addr = (uint64_t)(uintptr_t)mem[i];
        reg[i].len  = lens[i];
    }
    fflush(stdout);
    free(exchange(fd, reg, sizeof(reg), NULL));
    progress_until_peer(fd);
    /* the origin's last pass put pattern i + 1 over all of region i */
    for (int i = 0; i < NREG; i++) {
        for (size_t j = 0; j < lens[i]; j++) {
            CHECK(mem[i][j] == pattern_byte(j, (unsigned)i + 1), "%s: byte %zu is %#x",
                  names[i], j, mem[i][j]);
        }
    }
    barrier(fd);
    for (int i = 0; i < NREG; i++) {
        CHECK_OK(ucp_mem_unmap(ctx, memh[i]));
    }
    printf("rkey16 target passed\n");
    ucp_ep_destroy(ep);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    free(heap);
    free(aligned);
    return 0;
}

static void check_region(const region_t *r, ucp_rkey_h rkey, const char *name, unsigned seed)
{
    size_t len = (size_t)r->len;
    unsigned char *buf = malloc(len), *back = malloc(len);
    ucp_request_param_t p;
    uint64_t v64, old64;
    uint32_t v32, old32;
    uint64_t a = r->addr + ((8 - (r->addr & 7)) & 7); /* first 8-aligned address */

    memset(&p, 0, sizeof(p));
    fill(buf, len, seed);
    /* put: nbx for the first half, nbi for the rest */
    CHECK_OK(wait_op(ucp_put_nbx(ep, buf, len / 2, r->addr, rkey, &p)));
    CHECK(ucp_put_nbi(ep, buf + len / 2, len - len / 2, r->addr + len / 2, rkey) >= 0,
          "put_nbi");
    CHECK_OK(flush());
    /* get: nbi of everything, completed by an endpoint flush */
    memset(back, 0, len);
    CHECK(ucp_get_nbi(ep, back, len, r->addr, rkey) >= 0, "get_nbi");
    CHECK_OK(flush());
    for (size_t i = 0; i < len; i++) {
        CHECK(back[i] == buf[i], "%s: get_nbi byte %zu: %#x, not %#x", name, i, back[i],
              buf[i]);
    }
    /* get: nbx of an odd slice */
    memset(back, 0, len);
    CHECK_OK(wait_op(ucp_get_nbx(ep, back, len - 7, r->addr + 7, rkey, &p)));
    for (size_t i = 0; i < len - 7; i++) {
        CHECK(back[i] == buf[i + 7], "%s: get_nbx byte %zu", name, i);
    }
    /* atomics on the first aligned words (inside the first 64 bytes) */
    memcpy(&old64, buf + (a - r->addr), 8);
    p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    p.datatype     = ucp_dt_make_contig(8);
    v64 = 5;
    CHECK_OK(wait_op(ucp_atomic_op_nbx(ep, UCP_ATOMIC_OP_ADD, &v64, 1, a, rkey, &p)));
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_REPLY_BUFFER;
    p.reply_buffer = &v64;
    v64 = 7;
    CHECK_OK(wait_op(ucp_atomic_op_nbx(ep, UCP_ATOMIC_OP_ADD, &v64, 1, a, rkey, &p)));
    CHECK(v64 == old64 + 5, "%s: fetch-add returned %llx", name, (unsigned long long)v64);
    v64 = 0x1122334455667788ull;
    CHECK_OK(wait_op(ucp_atomic_op_nbx(ep, UCP_ATOMIC_OP_SWAP, &v64, 1, a, rkey, &p)));
    CHECK(v64 == old64 + 12, "%s: swap returned %llx", name, (unsigned long long)v64);
    {
        uint64_t cmp = 0x1122334455667788ull;
        v64 = 42;
        CHECK_OK(wait_op(ucp_atomic_op_nbx(ep, UCP_ATOMIC_OP_CSWAP, &cmp, 1, a, rkey, &p)));
        CHECK(v64 == 0x1122334455667788ull, "%s: cswap returned %llx", name,
              (unsigned long long)v64);
    }
    p.datatype = ucp_dt_make_contig(4);
    p.reply_buffer = &old32;
    v32 = 3;
    CHECK_OK(wait_op(ucp_atomic_op_nbx(ep, UCP_ATOMIC_OP_ADD, &v32, 1, a + 8, rkey, &p)));
    memcpy(&v32, buf + (a - r->addr) + 8, 4);
    CHECK(old32 == v32, "%s: 32-bit fetch-add returned %x, not %x", name, old32, v32);
    p.op_attr_mask = 0;
    CHECK_OK(wait_op(ucp_get_nbx(ep, &v64, 8, a, rkey, &p)));
    CHECK(v64 == 42, "%s: after cswap: %llx", name, (unsigned long long)v64);
    /* outside the region: refused, immediately or when completed */
    {
        ucs_status_t st = wait_op(ucp_put_nbx(ep, buf, 1, r->addr + len, rkey, &p));
        if (st == UCS_OK) {
            st = flush();
        }
        CHECK(st != UCS_OK, "%s: a put past the end succeeded", name);
        st = wait_op(ucp_get_nbx(ep, back, 2, r->addr + len - 1, rkey, &p));
        CHECK(st != UCS_OK, "%s: a get across the end succeeded", name);
    }
    free(buf);
    free(back);
}

static int origin(int fd)
{
    region_t *reg;
    size_t n;
    unsigned char empty[16];
    ucp_rkey_h rkey;

    setup(fd);
    reg = exchange(fd, NULL, 0, &n);
    CHECK(n == sizeof(region_t) * NREG, "layout of %zu bytes", n);
    for (int i = 0; i < NREG; i++) {
        unsigned char field[16];
        memcpy(field, reg[i].key, 16); /* only the fixed field travels */
        CHECK_OK(ucp_ep_rkey_unpack(ep, field, &rkey));
        memset(field, 0, sizeof(field)); /* the handle must not need the buffer */
        check_region(&reg[i], rkey, names[i], 1000 + (unsigned)i);
        ucp_rkey_destroy(rkey);
    }
    /* The empty key: accesses inside any mapped region work, others fail. */
    memset(empty, 0, sizeof(empty));
    CHECK_OK(ucp_ep_rkey_unpack(ep, empty, &rkey));
    check_region(&reg[1], rkey, "empty key on region 1", 2000);
    ucp_rkey_destroy(rkey);
    /* Garbage is not a key. */
    {
        unsigned char junk[16];
        memset(junk, 0xa5, sizeof(junk));
        CHECK(ucp_ep_rkey_unpack(ep, junk, &rkey) != UCS_OK, "garbage unpacked");
        memset(junk, 0xff, sizeof(junk));
        CHECK(ucp_ep_rkey_unpack(ep, junk, &rkey) != UCS_OK, "0xff bytes unpacked");
    }
    /* Finally the pattern the target checks: region i gets pattern i + 1. */
    for (int i = 0; i < NREG; i++) {
        unsigned char *buf = malloc(reg[i].len);
        ucp_request_param_t p;
        memset(&p, 0, sizeof(p));
        fill(buf, reg[i].len, (unsigned)i + 1);
        CHECK_OK(ucp_ep_rkey_unpack(ep, reg[i].key, &rkey));
        CHECK_OK(wait_op(ucp_put_nbx(ep, buf, reg[i].len, reg[i].addr, rkey, &p)));
        CHECK_OK(flush());
        ucp_rkey_destroy(rkey);
        free(buf);
    }
    full_write(fd, "d", 1);
    barrier(fd);
    printf("rkey16 origin passed\n");
    free(reg);
    ucp_ep_destroy(ep);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    return 0;
}

int main(void)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    return run_pair(target, origin);
}
