/* Remote memory access and atomics between two processes: memory allocated by the
 * library and memory of the application registered with it, packed and unpacked remote
 * keys, put/get (nbi, nb, nbx), flush, fetching and posted atomics on 32 and 64 bits
 * (every opcode, old and new interfaces), ucp_rkey_ptr, and an atomic size that is not
 * supported (must fail with an error the caller can fall back on). */
#include "common.h"
#include <poll.h>

static ucp_context_h ctx;
static ucp_worker_h worker;
static ucp_ep_h ep;

enum { LEN = 1 << 20 };

typedef struct {
    uint64_t alloc_addr, reg_addr;
    size_t alloc_key_len, reg_key_len;
} layout_t;

/* UCX calls the callback of an _nb operation unconditionally: pass one. */
static void empty_cb(void *req, ucs_status_t status)
{
    (void)req;
    (void)status;
}

static void setup(int fd)
{
    connect_peer(fd, UCP_FEATURE_RMA | UCP_FEATURE_AMO32 | UCP_FEATURE_AMO64, &ctx, &worker, &ep);
}

static ucs_status_t wait_op(void *r)
{
    return wait_and_free(worker, r);
}

static void flush(void)
{
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    CHECK_OK(wait_op(ucp_ep_flush_nbx(ep, &p)));
}

/* Target: maps memory, publishes keys, progresses until the origin is done. */
static int target(int fd)
{
    ucp_mem_map_params_t mp;
    ucp_mem_h alloc_h, reg_h;
    ucp_mem_attr_t attr;
    void *kbuf1, *kbuf2;
    layout_t lay;
    char *reg = aligned_alloc(4096, LEN);
    uint64_t *w;
    struct pollfd pfd = {fd, POLLIN, 0};
    char c;

    setup(fd);
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.length     = LEN;
    mp.flags      = UCP_MEM_MAP_ALLOCATE;
    CHECK_OK(ucp_mem_map(ctx, &mp, &alloc_h));
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    CHECK_OK(ucp_mem_query(alloc_h, &attr));
    CHECK(attr.length >= LEN && attr.address != NULL, "mem_query");
    memset(attr.address, 0, LEN);
    memset(reg, 0, LEN);
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address    = reg;
    CHECK_OK(ucp_mem_map(ctx, &mp, &reg_h));

    CHECK_OK(ucp_rkey_pack(ctx, alloc_h, &kbuf1, &lay.alloc_key_len));
    CHECK_OK(ucp_rkey_pack(ctx, reg_h, &kbuf2, &lay.reg_key_len));
    lay.alloc_addr = (uintptr_t)attr.address;
    lay.reg_addr   = (uintptr_t)reg;
    full_write(fd, &lay, sizeof(lay));
    full_write(fd, kbuf1, lay.alloc_key_len);
    full_write(fd, kbuf2, lay.reg_key_len);
    ucp_rkey_buffer_release(kbuf1);
    ucp_rkey_buffer_release(kbuf2);

    /* serve (emulated accesses need our progress) until the origin says done */
    for (;;) {
        ucp_worker_progress(worker);
        if (poll(&pfd, 1, 0) == 1) {
            break;
        }
    }
    full_read(fd, &c, 1);
    /* check what the origin left: a pattern at offset 4096 of both regions */
    CHECK(verify((char*)attr.address + 4096, 100000, 1) == 0, "allocated region data");
    CHECK(verify(reg + 4096, 100000, 2) == 0, "registered region data");
    w = (uint64_t*)attr.address;
    CHECK(w[0] == 1000 + 5 && w[1] == 0x77, "atomics left %llu %llx",
          (unsigned long long)w[0], (unsigned long long)w[1]);
    full_write(fd, &c, 1);
    full_read(fd, &c, 1);
    CHECK_OK(ucp_mem_unmap(ctx, alloc_h));
    CHECK_OK(ucp_mem_unmap(ctx, reg_h));
    ucp_ep_destroy(ep);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    free(reg);
    printf("[%d] rma target passed\n", (int)getpid());
    return 0;
}

static void region_test(uint64_t base, ucp_rkey_h rkey, unsigned seed, const char *what)
{
    char *buf = malloc(200000), *back = malloc(200000);
    ucp_request_param_t p;
    /* put_nbi + flush, get_nbi + flush */
    fill(buf, 100000, seed);
    CHECK(!UCS_STATUS_IS_ERR(ucp_put_nbi(ep, buf, 100000, base + 4096, rkey)), "put_nbi");
    flush();
    memset(back, 0, 100000);
    CHECK(!UCS_STATUS_IS_ERR(ucp_get_nbi(ep, back, 100000, base + 4096, rkey)), "get_nbi");
    flush();
    CHECK(verify(back, 100000, seed) == 0, "%s: get_nbi after put_nbi", what);
    /* nbx with callback-less requests */
    memset(&p, 0, sizeof(p));
    fill(buf, 5000, seed + 10);
    CHECK_OK(wait_op(ucp_put_nbx(ep, buf, 5000, base + 200000, rkey, &p)));
    memset(back, 0, 5000);
    CHECK_OK(wait_op(ucp_get_nbx(ep, back, 5000, base + 200000, rkey, &p)));
    CHECK(verify(back, 5000, seed + 10) == 0, "%s: get_nbx after put_nbx", what);
    /* older interface */
    CHECK_OK(ucp_put(ep, buf, 64, base + 300000, rkey));
    memset(back, 0, 64);
    CHECK_OK(ucp_get(ep, back, 64, base + 300000, rkey));
    CHECK(memcmp(back, buf, 64) == 0, "%s: ucp_put/ucp_get", what);
    free(buf);
    free(back);
}

static void atomics_test(uint64_t base, ucp_rkey_h rkey)
{
    uint64_t r64 = 0, v64;
    uint32_t r32 = 0, v32;
    ucp_request_param_t p;
    uint64_t a = base;            /* 64-bit word */
    uint64_t b = base + 8;        /* 64-bit word */
    uint64_t c = base + 16;       /* two 32-bit words */

    CHECK_OK(ucp_atomic_post(ep, UCP_ATOMIC_POST_OP_ADD, 1000, 8, a, rkey));
    CHECK_OK(wait_op(ucp_atomic_fetch_nb(ep, UCP_ATOMIC_FETCH_OP_FADD, 5, &r64, 8, a, rkey, empty_cb)));
    CHECK(r64 == 1000, "fadd64 returned %llu", (unsigned long long)r64);
    r64 = 0xff;
    CHECK_OK(wait_op(ucp_atomic_fetch_nb(ep, UCP_ATOMIC_FETCH_OP_SWAP, 0xff, &r64, 8, b, rkey, empty_cb)));
    CHECK(r64 == 0, "swap64 returned %llx", (unsigned long long)r64);
    r64 = 0x77; /* cswap: value is the condition, *result the new value */
    CHECK_OK(wait_op(ucp_atomic_fetch_nb(ep, UCP_ATOMIC_FETCH_OP_CSWAP, 0xff, &r64, 8, b, rkey, empty_cb)));
    CHECK(r64 == 0xff, "cswap64 returned %llx", (unsigned long long)r64);
    r64 = 0x1;
    CHECK_OK(wait_op(ucp_atomic_fetch_nb(ep, UCP_ATOMIC_FETCH_OP_CSWAP, 0xdead, &r64, 8, b, rkey, empty_cb)));
    CHECK(r64 == 0x77, "failed cswap64 returned %llx", (unsigned long long)r64);

    /* 32 bits: the neighbour word must stay untouched */
    CHECK_OK(ucp_atomic_post(ep, UCP_ATOMIC_POST_OP_OR, 0xf0, 4, c, rkey));
    CHECK_OK(wait_op(ucp_atomic_fetch_nb(ep, UCP_ATOMIC_FETCH_OP_FXOR, 0xff, &r32, 4, c, rkey, empty_cb)));
    CHECK(r32 == 0xf0, "fxor32 returned %x", r32);
    CHECK_OK(ucp_atomic_fadd32(ep, 1, c + 4, rkey, &r32));
    CHECK(r32 == 0, "fadd32 returned %u", r32);
    CHECK_OK(ucp_atomic_cswap32(ep, 1, 9, c + 4, rkey, &r32));
    CHECK(r32 == 1, "cswap32 returned %u", r32);
    CHECK_OK(wait_op(ucp_atomic_fetch_nb(ep, UCP_ATOMIC_FETCH_OP_FAND, 0x0f, &r32, 4, c, rkey,
                                         empty_cb)));
    CHECK(r32 == 0x0f, "fand32 returned %x", r32);
    CHECK_OK(ucp_worker_flush(worker));

    /* ucp_atomic_op_nbx */
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER;
    p.datatype     = ucp_dt_make_contig(4);
    v32            = 3;
    p.reply_buffer = &r32;
    CHECK_OK(wait_op(ucp_atomic_op_nbx(ep, UCP_ATOMIC_OP_ADD, &v32, 1, c + 4, rkey, &p)));
    CHECK(r32 == 9, "op_nbx add32 returned %u", r32);
    v32 = 12; /* compare */
    r32 = 40; /* swap in */
    CHECK_OK(wait_op(ucp_atomic_op_nbx(ep, UCP_ATOMIC_OP_CSWAP, &v32, 1, c + 4, rkey, &p)));
    CHECK(r32 == 12, "op_nbx cswap32 returned %u", r32);
    p.datatype = ucp_dt_make_contig(8);
    p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    v64 = 0;
    CHECK_OK(wait_op(ucp_atomic_op_nbx(ep, UCP_ATOMIC_OP_ADD, &v64, 1, a, rkey, &p)));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER;
    p.reply_buffer = &r64;
    CHECK_OK(wait_op(ucp_atomic_op_nbx(ep, UCP_ATOMIC_OP_SWAP, &v64, 1, c, rkey, &p)));
    CHECK((r64 & 0xffffffffu) == 0x0f && (r64 >> 32) == 40, "words %llx",
          (unsigned long long)r64);
    flush();

    /* unsupported size: an error the caller can fall back on, nothing changes */
    CHECK(ucp_atomic_post(ep, UCP_ATOMIC_POST_OP_ADD, 1, 2, a, rkey) == UCS_ERR_UNSUPPORTED,
          "2-byte atomic");
    p.datatype = ucp_dt_make_contig(2);
    CHECK(UCS_PTR_STATUS(ucp_atomic_op_nbx(ep, UCP_ATOMIC_OP_ADD, &v32, 1, a, rkey, &p)) ==
          UCS_ERR_UNSUPPORTED, "2-byte op_nbx");
}

static int origin(int fd)
{
    layout_t lay;
    void *k1, *k2, *p;
    ucp_rkey_h alloc_key, reg_key;
    ucs_status_t st;
    char c = 'd';

    setup(fd);
    full_read(fd, &lay, sizeof(lay));
    k1 = malloc(lay.alloc_key_len);
    k2 = malloc(lay.reg_key_len);
    full_read(fd, k1, lay.alloc_key_len);
    full_read(fd, k2, lay.reg_key_len);
    CHECK_OK(ucp_ep_rkey_unpack(ep, k1, &alloc_key));
    CHECK_OK(ucp_ep_rkey_unpack(ep, k2, &reg_key));
    free(k1);
    free(k2);

    region_test(lay.alloc_addr, alloc_key, 1, "allocated");
    region_test(lay.reg_addr, reg_key, 2, "registered");
    atomics_test(lay.alloc_addr, alloc_key);
    atomics_test(lay.reg_addr, reg_key);
    /* leave known values for the target to check */
    {
        uint64_t zero = 0, x = 0x77, r;
        CHECK_OK(ucp_put(ep, &zero, 8, lay.alloc_addr, alloc_key));
        CHECK_OK(ucp_atomic_add64(ep, 1000, lay.alloc_addr, alloc_key));
        CHECK_OK(ucp_atomic_fadd64(ep, 5, lay.alloc_addr, alloc_key, &r));
        CHECK_OK(ucp_atomic_swap64(ep, x, lay.alloc_addr + 8, alloc_key, &r));
        CHECK_OK(ucp_worker_flush(worker));
    }
    /* put the patterns back (the atomics above overwrote the start of the regions only) */
    region_test(lay.alloc_addr, alloc_key, 1, "allocated");
    region_test(lay.reg_addr, reg_key, 2, "registered");

    /* a direct pointer: allowed to be unsupported, must then say so */
    st = ucp_rkey_ptr(alloc_key, lay.alloc_addr + 4096, &p);
    CHECK(st == UCS_OK || st == UCS_ERR_UNSUPPORTED, "rkey_ptr: %s", ucs_status_string(st));
    if (st == UCS_OK) {
        CHECK(verify(p, 100000, 1) == 0, "data through rkey_ptr");
    }
    printf("[%d] rkey_ptr on allocated memory: %s\n", (int)getpid(), ucs_status_string(st));
    CHECK(ucp_rkey_ptr(reg_key, lay.alloc_addr + 1, &p) != UCS_OK ||
              ucp_rkey_ptr(reg_key, lay.reg_addr, &p) == UCS_OK,
          "rkey_ptr outside the region");

    CHECK_OK(ucp_worker_fence(worker));
    flush();
    full_write(fd, &c, 1);
    full_read(fd, &c, 1);
    ucp_rkey_destroy(alloc_key);
    ucp_rkey_destroy(reg_key);
    full_write(fd, &c, 1);
    ucp_ep_destroy(ep);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    printf("[%d] rma origin passed\n", (int)getpid());
    return 0;
}

int main(void)
{
    return run_pair(origin, target);
}
