/* One process, UCX's uct.h API on rucx's library: the self transport (loopback AM, put,
 * get, atomics on the process's own memory), two posix interfaces on one worker (a full
 * FIFO, pending requests, flush completions), the worker's progress array with more
 * callbacks than its fast slots, and errors for misuse and unsupported calls.
 * Prints "UCT API SUCCESS" at the end; exits non-zero on the first failure. */
#include <uct/api/uct.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FAIL(...) do { fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } while (0)
#define CHECK(st, what) do { ucs_status_t _s = (st); \
                             if (_s != UCS_OK) FAIL("%s: %s", what, ucs_status_string(_s)); } while (0)
#define EXPECT(st, want, what) do { ucs_status_t _s = (st); if (_s != (want)) \
        FAIL("%s: %s, want %s", what, ucs_status_string(_s), ucs_status_string(want)); } while (0)

static uct_worker_h worker;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct iface {
    uct_component_h   comp;
    uct_md_h          md;
    uct_iface_h       iface;
    uct_iface_attr_t  attr;
    unsigned char     dev[256], addr[256];
};

static void open_iface(struct iface *f, const char *tl, const char *dev)
{
    uct_component_h *comps;
    unsigned n, i;
    uct_md_config_t *mc;
    uct_iface_config_t *ic;
    uct_iface_params_t p;

    CHECK(uct_query_components(&comps, &n), "uct_query_components");
    f->md = NULL;
    for (i = 0; i < n && f->md == NULL; i++) {
        uct_component_attr_t ca;
        ca.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME;
        CHECK(uct_component_query(comps[i], &ca), "uct_component_query");
        if (strcmp(ca.name, tl)) continue;
        CHECK(uct_md_config_read(comps[i], NULL, NULL, &mc), "uct_md_config_read");
        CHECK(uct_md_open(comps[i], tl, mc, &f->md), "uct_md_open");
        uct_config_release(mc);
        f->comp = comps[i];
    }
    uct_release_component_list(comps);
    if (f->md == NULL) FAIL("no component %s", tl);
    CHECK(uct_md_iface_config_read(f->md, tl, NULL, NULL, &ic), "iface_config_read");
    memset(&p, 0, sizeof(p));
    p.field_mask           = UCT_IFACE_PARAM_FIELD_OPEN_MODE;
    p.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    p.mode.device.tl_name  = tl;
    p.mode.device.dev_name = dev;
    CHECK(uct_iface_open(f->md, worker, &p, ic, &f->iface), "uct_iface_open");
    uct_config_release(ic);
    CHECK(uct_iface_query(f->iface, &f->attr), "uct_iface_query");
    CHECK(uct_iface_get_device_address(f->iface, (uct_device_addr_t*)f->dev), "dev addr");
    CHECK(uct_iface_get_address(f->iface, (uct_iface_addr_t*)f->addr), "iface addr");
    uct_iface_progress_enable(f->iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
}

static uct_ep_h connect_to(struct iface *from, struct iface *to)
{
    uct_ep_params_t ep;
    uct_ep_h e;
    if (!uct_iface_is_reachable(from->iface, (uct_device_addr_t*)to->dev,
                                (uct_iface_addr_t*)to->addr)) FAIL("unreachable");
    ep.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR |
                    UCT_EP_PARAM_FIELD_IFACE_ADDR;
    ep.iface      = from->iface;
    ep.dev_addr   = (uct_device_addr_t*)to->dev;
    ep.iface_addr = (uct_iface_addr_t*)to->addr;
    CHECK(uct_ep_create(&ep, &e), "uct_ep_create");
    return e;
}

static void close_iface(struct iface *f)
{
    uct_iface_close(f->iface);
    uct_md_close(f->md);
}

static int received;
static uint64_t last_hdr;

static ucs_status_t am_cb(void *arg, void *data, size_t len, unsigned flags)
{
    if (len < 8) FAIL("am of %zu bytes", len);
    memcpy(&last_hdr, data, 8);
    received++;
    (void)arg; (void)flags;
    return UCS_OK;
}

/* Progress-array callbacks: each counts its calls. */
static unsigned calls[12];
static unsigned count_cb(void *arg)
{
    calls[(uintptr_t)arg]++;
    return 0;
}

/* A pending request that sends one short message when called. */
struct pending {
    uct_pending_req_t req;
    uct_ep_h          ep;
    int               called;
};

static ucs_status_t pending_cb(uct_pending_req_t *self)
{
    struct pending *p = (struct pending*)self;
    ucs_status_t s = uct_ep_am_short(p->ep, 3, 0xabcdef, NULL, 0);
    p->called++;
    return s;
}

static void purge_cb(uct_pending_req_t *r, void *arg)
{
    (void)r;
    (*(int*)arg)++;
}

static int flushed;
static void flush_done(uct_completion_t *c)
{
    flushed++;
    (void)c;
}

static void test_self(void)
{
    struct iface f;
    uct_ep_h ep;
    uct_allocated_memory_t mem;
    uct_md_attr_t ma;
    unsigned char key[256], tmp[512];
    uct_rkey_bundle_t rk;
    uint64_t old = 0, *word;
    int i;

    open_iface(&f, "self", "memory0");
    if (!(f.attr.cap.flags & UCT_IFACE_FLAG_AM_SHORT)) FAIL("self: no am_short");
    CHECK(uct_iface_set_am_handler(f.iface, 3, am_cb, NULL, 0), "set_am_handler");
    ep = connect_to(&f, &f);
    for (i = 0; i < 10; i++) {
        CHECK(uct_ep_am_short(ep, 3, 1000 + i, "abc", 3), "self am_short");
        while (received < i + 1) uct_worker_progress(worker);
        if (last_hdr != (uint64_t)(1000 + i)) FAIL("self: header %lu", (unsigned long)last_hdr);
    }
    CHECK(uct_iface_mem_alloc(f.iface, 4096, UCT_MD_MEM_ACCESS_ALL, "self", &mem), "mem_alloc");
    CHECK(uct_md_query(f.md, &ma), "uct_md_query");
    if (ma.rkey_packed_size > sizeof(key)) FAIL("rkey_packed_size %zu", ma.rkey_packed_size);
    CHECK(uct_md_mkey_pack(f.md, mem.memh, key), "mkey_pack");
    CHECK(uct_rkey_unpack(f.comp, key, &rk), "rkey_unpack");
    for (i = 0; i < 200; i++) tmp[i] = (unsigned char)(i * 3);
    CHECK(uct_ep_put_short(ep, tmp, 200, (uintptr_t)mem.address + 10, rk.rkey), "self put");
    if (memcmp((char*)mem.address + 10, tmp, 200)) FAIL("self put data");
    memset(tmp, 0, sizeof(tmp));
    {
        uct_iov_t iov = { tmp, 200, NULL, 0, 1 };
        CHECK(uct_ep_get_zcopy(ep, &iov, 1, (uintptr_t)mem.address + 10, rk.rkey, NULL),
              "self get");
        if (memcmp((char*)mem.address + 10, tmp, 200)) FAIL("self get data");
    }
    word = (uint64_t*)((char*)mem.address + 1024);
    *word = 40;
    CHECK(uct_ep_atomic64_fetch(ep, UCT_ATOMIC_OP_ADD, 2, &old, (uintptr_t)word, rk.rkey, NULL),
          "self fadd");
    if (old != 40 || *word != 42) FAIL("self fadd: %lu %lu", (unsigned long)old,
                                       (unsigned long)*word);
    /* A put outside the key's range is refused. */
    if (uct_ep_put_short(ep, tmp, 8, (uintptr_t)mem.address + 4095, rk.rkey) == UCS_OK)
        FAIL("put outside the key accepted");
    /* Unsupported operations say so. */
    EXPECT(uct_ep_get_short(ep, tmp, 8, (uintptr_t)mem.address, rk.rkey), UCS_ERR_UNSUPPORTED,
           "get_short");
    EXPECT(uct_ep_get_address(ep, (uct_ep_addr_t*)tmp), UCS_ERR_UNSUPPORTED, "ep_get_address");
    EXPECT(uct_ep_connect_to_ep(ep, (uct_device_addr_t*)tmp, (uct_ep_addr_t*)tmp),
           UCS_ERR_UNSUPPORTED, "connect_to_ep");
    CHECK(uct_rkey_release(f.comp, &rk), "rkey_release");
    uct_iface_mem_free(&mem);
    uct_ep_destroy(ep);
    close_iface(&f);
    printf("checked self\n");
}

static void test_pending_and_flush(void)
{
    struct iface a, b;
    uct_ep_h ep;
    struct pending p;
    uct_completion_t comp;
    ucs_status_t s;
    int sent = 0, before;
    double t0;

    open_iface(&a, "posix", "memory");
    open_iface(&b, "posix", "memory");
    CHECK(uct_iface_set_am_handler(b.iface, 3, am_cb, NULL, 0), "set_am_handler");
    ep = connect_to(&a, &b);

    /* Resources now: pending_add declines. */
    p.req.func = pending_cb;
    p.ep       = ep;
    p.called   = 0;
    EXPECT(uct_ep_pending_add(ep, &p.req, 0), UCS_ERR_BUSY, "pending_add with resources");

    /* Fill b's FIFO without progressing. */
    while ((s = uct_ep_am_short(ep, 3, sent, NULL, 0)) == UCS_OK) {
        if (++sent > 100000) FAIL("FIFO never filled");
    }
    EXPECT(s, UCS_ERR_NO_RESOURCE, "am_short on a full FIFO");
    CHECK(uct_ep_pending_add(ep, &p.req, 0), "pending_add");
    /* Queued requests hold back other sends. */
    EXPECT(uct_ep_am_short(ep, 3, 0, NULL, 0), UCS_ERR_NO_RESOURCE, "send behind pending");
    EXPECT(uct_ep_flush(ep, 0, NULL), UCS_ERR_NO_RESOURCE, "flush behind pending");

    before = received;
    t0 = now();
    while (p.called == 0 || received < before + sent + 1) {
        uct_worker_progress(worker);
        if (now() - t0 > 10) FAIL("pending request not dispatched (%d, %d of %d)", p.called,
                                  received - before, sent + 1);
    }
    /* It may run more than once: it stays queued while its send finds no room. */
    if (p.called < 1) FAIL("pending callback not called");
    if (last_hdr != 0xabcdef) FAIL("last message is not the pending one");

    /* Purge hands queued requests back without calling them. */
    while (uct_ep_am_short(ep, 3, 1, NULL, 0) == UCS_OK);
    p.called = 0;
    CHECK(uct_ep_pending_add(ep, &p.req, 0), "pending_add");
    {
        int purged = 0;
        uct_ep_pending_purge(ep, purge_cb, &purged);
        if (purged != 1 || p.called) FAIL("purge: %d purged, %d called", purged, p.called);
    }
    t0 = now();
    while (uct_iface_flush(a.iface, 0, NULL) != UCS_OK || received < before + 2 * sent) {
        uct_worker_progress(worker);
        if (now() - t0 > 10) FAIL("drain");
    }
    /* Flush with a completion on an idle endpoint: done at once. */
    comp.func = flush_done; comp.count = 1; comp.status = UCS_OK;
    s = uct_ep_flush(ep, 0, &comp);
    if (s == UCS_INPROGRESS) {
        t0 = now();
        while (!flushed) { uct_worker_progress(worker); if (now() - t0 > 10) FAIL("flush"); }
    } else {
        CHECK(s, "uct_ep_flush");
    }
    CHECK(uct_iface_fence(a.iface, 0), "iface_fence");
    CHECK(uct_ep_fence(ep, 0), "ep_fence");
    uct_ep_destroy(ep);
    close_iface(&a);
    close_iface(&b);
    printf("checked pending and flush\n");
}

static void test_progress_array(void)
{
    uct_worker_cb_id_t ids[10];
    unsigned i;

    for (i = 0; i < 10; i++) {
        ids[i] = UCS_CALLBACKQ_ID_NULL;
        uct_worker_progress_register_safe(worker, count_cb, (void*)(uintptr_t)i, 0, &ids[i]);
        if (ids[i] == UCS_CALLBACKQ_ID_NULL) FAIL("register_safe gave no id");
    }
    memset(calls, 0, sizeof(calls));
    uct_worker_progress(worker);
    uct_worker_progress(worker);
    for (i = 0; i < 10; i++) {
        if (calls[i] != 2) FAIL("callback %u called %u times, want 2", i, calls[i]);
    }
    for (i = 0; i < 10; i += 2) {
        uct_worker_progress_unregister_safe(worker, &ids[i]);
        if (ids[i] != UCS_CALLBACKQ_ID_NULL) FAIL("unregister_safe kept the id");
    }
    memset(calls, 0, sizeof(calls));
    uct_worker_progress(worker);
    for (i = 0; i < 10; i++) {
        if (calls[i] != (i % 2)) FAIL("after removal, callback %u called %u times", i, calls[i]);
    }
    for (i = 1; i < 10; i += 2) uct_worker_progress_unregister_safe(worker, &ids[i]);
    memset(calls, 0, sizeof(calls));
    uct_worker_progress(worker);
    for (i = 0; i < 10; i++) if (calls[i]) FAIL("removed callback %u called", i);
    printf("checked progress array\n");
}

static void test_misuse(void)
{
    uct_md_h md;
    uct_component_h *comps;
    unsigned n;
    uct_rkey_bundle_t rk;
    unsigned char junk[64];

    EXPECT(uct_md_open(NULL, "posix", NULL, &md), UCS_ERR_INVALID_PARAM, "md_open(NULL)");
    CHECK(uct_query_components(&comps, &n), "uct_query_components");
    EXPECT(uct_md_open(comps[0], "no-such-md", NULL, &md), UCS_ERR_NO_DEVICE, "md_open(name)");
    memset(junk, 0xee, sizeof(junk));
    if (uct_rkey_unpack(comps[0], junk, &rk) == UCS_OK) FAIL("garbage key unpacked");
    uct_release_component_list(comps);
    EXPECT(uct_iface_query(NULL, NULL), UCS_ERR_INVALID_PARAM, "iface_query(NULL)");
    printf("checked misuse\n");
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    CHECK(uct_worker_create(NULL, UCS_THREAD_MODE_SINGLE, &worker), "uct_worker_create");
    test_self();
    test_pending_and_flush();
    test_progress_array();
    test_misuse();
    uct_worker_destroy(worker);
    printf("UCT API SUCCESS\n");
    return 0;
}
