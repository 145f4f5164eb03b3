/* Generic datatypes: the application packs and unpacks (here: every other 32-bit word
 * of a buffer). Tag messages of several sizes (eager, fragmented, rendezvous), each
 * checked; every start_pack/start_unpack is matched by exactly one finish. */
#include "common.h"

static ucp_context_h ctx;
static ucp_worker_h worker;
static ucp_ep_h ep;
static int starts, finishes;

typedef struct {
    uint32_t *base;
    size_t count; /* words carried */
} state_t;

static void *start_pack(void *context, const void *buffer, size_t count)
{
    state_t *s = malloc(sizeof(*s));
    s->base  = (uint32_t*)buffer;
    s->count = count;
    starts++;
    CHECK(context == (void*)&ctx, "context");
    return s;
}

static void *start_unpack(void *context, void *buffer, size_t count)
{
    return start_pack(context, buffer, count);
}

static size_t packed_size(void *state)
{
    return ((state_t*)state)->count * 4;
}

static size_t pack(void *state, size_t offset, void *dest, size_t max)
{
    state_t *s = state;
    size_t n = 0;
    CHECK(offset % 4 == 0, "pack offset %zu", offset);
    while (n + 4 <= max && offset + n < s->count * 4) {
        memcpy((char*)dest + n, &s->base[2 * ((offset + n) / 4)], 4);
        n += 4;
    }
    return n;
}

static ucs_status_t unpack(void *state, size_t offset, const void *src, size_t length)
{
    state_t *s = state;
    CHECK(offset % 4 == 0 && length % 4 == 0, "unpack %zu+%zu", offset, length);
    for (size_t n = 0; n < length; n += 4) {
        memcpy(&s->base[2 * ((offset + n) / 4)], (const char*)src + n, 4);
    }
    return UCS_OK;
}

static void finish(void *state)
{
    finishes++;
    free(state);
}

static const ucp_generic_dt_ops_t ops = {start_pack, start_unpack, packed_size, pack, unpack,
                                         finish};

static void setup(int fd)
{
    connect_peer(fd, UCP_FEATURE_TAG, &ctx, &worker, &ep);
}

static ucs_status_t wait_op(void *r)
{
    return wait_and_free(worker, r);
}

static const size_t words[] = {0, 1, 100, 3000, 40000, 500000};

static int side(int fd, int rank)
{
    ucp_datatype_t dt;
    uint32_t *buf = malloc(2 * 500000 * 4);
    ucp_request_param_t p;
    CHECK_OK(ucp_dt_create_generic(&ops, &ctx, &dt));
    CHECK((dt & UCP_DATATYPE_CLASS_MASK) == UCP_DATATYPE_GENERIC, "generic class bits");
    setup(fd);
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    p.datatype     = dt;
    for (size_t k = 0; k < sizeof(words) / sizeof(words[0]); k++) {
        size_t n = words[k];
        if (rank == 0) {
            for (size_t i = 0; i < 2 * n; i++) {
                buf[i] = (i % 2 == 0) ? (uint32_t)(k * 1000003 + i) : 0xdeadbeef;
            }
            CHECK_OK(wait_op(ucp_tag_send_nbx(ep, buf, n, k, &p)));
        } else {
            ucp_tag_recv_info_t info;
            void *r;
            for (size_t i = 0; i < 2 * n; i++) {
                buf[i] = 0x55555555;
            }
            p.op_attr_mask |= UCP_OP_ATTR_FIELD_RECV_INFO;
            p.recv_info.tag_info = &info;
            r = ucp_tag_recv_nbx(worker, buf, n, k, (ucp_tag_t)-1, &p);
            CHECK_OK(wait_op(r));
            for (size_t i = 0; i < 2 * n; i++) {
                uint32_t want = (i % 2 == 0) ? (uint32_t)(k * 1000003 + i) : 0x55555555;
                CHECK(buf[i] == want, "%zu words: word %zu is %x, not %x", n, i, buf[i], want);
            }
            p.op_attr_mask &= ~UCP_OP_ATTR_FIELD_RECV_INFO;
        }
    }
    barrier(fd);
    CHECK(starts == finishes && starts == (int)(sizeof(words) / sizeof(words[0])),
          "%d starts, %d finishes", starts, finishes);
    ucp_ep_destroy(ep);
    ucp_worker_destroy(worker);
    ucp_dt_destroy(dt);
    ucp_cleanup(ctx);
    free(buf);
    printf("[%d] generic datatype test passed (rank %d)\n", (int)getpid(), rank);
    return 0;
}

static int parent(int fd) { return side(fd, 0); }
static int child(int fd) { return side(fd, 1); }

int main(void)
{
    return run_pair(parent, child);
}
