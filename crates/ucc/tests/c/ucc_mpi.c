/* rucx libucc test: every collective of UCC's API over MPI_Iallgather as the OOB, on the
   world team (team OOB), a split team (team OOB over a sub-communicator) and a reversed
   team (context OOB + strided ep map), in place and not, persistent and not, with the
   data checked. Built against rucx's own ucc.h. Prints "UCC_MPI_OK" on success. */
#define _GNU_SOURCE
#include <ucc/api/ucc.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int wrank;

/* The LP64 layouts libucc's Rust mirrors assert (crates/ucc/src/ffi.rs). */
#include <stddef.h>
_Static_assert(sizeof(ucc_oob_coll_t) == 40, "ucc_oob_coll_t");
_Static_assert(sizeof(ucc_lib_params_t) == 40, "ucc_lib_params_t");
_Static_assert(sizeof(ucc_context_params_t) == 80, "ucc_context_params_t");
_Static_assert(sizeof(ucc_context_attr_t) == 40, "ucc_context_attr_t");
_Static_assert(sizeof(ucc_ep_map_t) == 32, "ucc_ep_map_t");
_Static_assert(offsetof(ucc_team_params_t, oob) == 72, "team params oob");
_Static_assert(offsetof(ucc_team_params_t, ep_map) == 168, "team params ep_map");
_Static_assert(sizeof(ucc_team_params_t) == 208, "ucc_team_params_t");
_Static_assert(sizeof(ucc_team_attr_t) == 72, "ucc_team_attr_t");
_Static_assert(offsetof(ucc_coll_args_t, src) == 16, "coll args src");
_Static_assert(offsetof(ucc_coll_args_t, dst) == 56, "coll args dst");
_Static_assert(offsetof(ucc_coll_args_t, op) == 96, "coll args op");
_Static_assert(offsetof(ucc_coll_args_t, tag) == 124, "coll args tag");
_Static_assert(offsetof(ucc_coll_args_t, cb) == 136, "coll args cb");
_Static_assert(sizeof(ucc_coll_args_t) == 184, "ucc_coll_args_t");

/* Helper symbols libucc exports outside ucc.h (UCC's tools declare them themselves). */
typedef struct {
    ucc_memory_type_t mt;
    int from_pool;
    void *addr;
} mc_header_t;
extern const char *ucc_memory_type_names[];
extern const size_t ucc_dt_predefined_sizes[UCC_DT_PREDEFINED_LAST];
ucc_status_t ucc_mc_available(ucc_memory_type_t mem_type);
ucc_status_t ucc_mc_alloc(mc_header_t **h_ptr, size_t len, ucc_memory_type_t mem_type);
ucc_status_t ucc_mc_free(mc_header_t *h_ptr);
ucc_status_t ucc_mc_memset(void *ptr, int value, size_t size, ucc_memory_type_t mem_type);
ucc_status_t ucc_mc_memcpy(void *dst, const void *src, size_t len, ucc_memory_type_t dst_mem,
                           ucc_memory_type_t src_mem);
ucc_status_t ucc_str_to_memunits(const char *buf, void *dest);

/* The executor, as UCC's tools see it. */
typedef struct { ucc_ee_type_t ee_type; void *ee_context; } eee_t;
typedef struct { uint64_t mask; ucc_ee_type_t ee_type; uint64_t task_types; } eee_params_t;
typedef struct {
    void *dst;
    union { void *srcs[9]; void **srcs_ext; };
    size_t count;
    double alpha;
    ucc_datatype_t dt;
    ucc_reduction_op_t op;
    uint16_t n_srcs;
} eee_reduce_t;
typedef struct {
    void *dst, *src1, *src2;
    size_t stride, count;
    double alpha;
    ucc_datatype_t dt;
    ucc_reduction_op_t op;
    uint16_t n_src2;
} eee_reduce_strided_t;
typedef struct {
    void *dst[7], *src1[7], *src2[7];
    size_t counts[7];
    ucc_datatype_t dt;
    ucc_reduction_op_t op;
    uint16_t n_bufs;
} eee_reduce_multi_dst_t;
typedef struct { const void *src; void *dst; size_t len; } eee_copy_t;
typedef struct { void *src[7], *dst[7]; size_t counts[7]; size_t num_vectors; } eee_copy_multi_t;
typedef struct {
    uint16_t task_type, flags;
    union {
        eee_reduce_t reduce;
        eee_reduce_strided_t reduce_strided;
        eee_reduce_multi_dst_t reduce_multi_dst;
        eee_copy_t copy;
        eee_copy_multi_t copy_multi;
    };
} eee_args_t;
typedef struct { eee_t *eee; eee_args_t args; ucc_status_t status; } eee_task_t;
_Static_assert(sizeof(eee_args_t) == 248, "executor task args");
ucc_status_t ucc_ee_executor_init(const eee_params_t *params, eee_t **executor);
ucc_status_t ucc_ee_executor_status(const eee_t *executor);
ucc_status_t ucc_ee_executor_start(eee_t *executor, void *ee_context);
ucc_status_t ucc_ee_executor_stop(eee_t *executor);
ucc_status_t ucc_ee_executor_finalize(eee_t *executor);
ucc_status_t ucc_ee_executor_task_post(eee_t *executor, const eee_args_t *args, eee_task_t **task);
ucc_status_t ucc_ee_executor_task_test(const eee_task_t *task);
ucc_status_t ucc_ee_executor_task_finalize(eee_task_t *task);

#define FAIL(...)                                                             \
    do {                                                                      \
        fprintf(stderr, "[%d] %s:%d: ", wrank, __FILE__, __LINE__);           \
        fprintf(stderr, __VA_ARGS__);                                         \
        fprintf(stderr, "\n");                                                \
        MPI_Abort(MPI_COMM_WORLD, 1);                                         \
    } while (0)

#define CHECK(call)                                                           \
    do {                                                                      \
        ucc_status_t s_ = (call);                                             \
        if (s_ != UCC_OK) FAIL("%s: %s (%d)", #call, ucc_status_string(s_), s_); \
    } while (0)

#define EXPECT(call, want)                                                    \
    do {                                                                      \
        ucc_status_t s_ = (call);                                             \
        if (s_ != (want)) FAIL("%s gave %d, expected %d", #call, s_, (int)(want)); \
    } while (0)

static ucc_status_t oob_allgather(void *sbuf, void *rbuf, size_t len, void *info,
                                  void **req)
{
    MPI_Comm comm = (MPI_Comm)info;
    MPI_Request *r = malloc(sizeof(*r));
    if (MPI_Iallgather(sbuf, (int)len, MPI_BYTE, rbuf, (int)len, MPI_BYTE, comm, r) !=
        MPI_SUCCESS) {
        free(r);
        return UCC_ERR_NO_MESSAGE;
    }
    *req = r;
    return UCC_OK;
}

static ucc_status_t oob_test(void *req)
{
    int done = 0;
    MPI_Test((MPI_Request *)req, &done, MPI_STATUS_IGNORE);
    return done ? UCC_OK : UCC_INPROGRESS;
}

static ucc_status_t oob_free(void *req)
{
    free(req);
    return UCC_OK;
}

static ucc_oob_coll_t oob_of(MPI_Comm comm)
{
    ucc_oob_coll_t o;
    int r, n;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &n);
    memset(&o, 0, sizeof(o));
    o.allgather = oob_allgather;
    o.req_test = oob_test;
    o.req_free = oob_free;
    o.coll_info = (void *)comm;
    o.n_oob_eps = (uint32_t)n;
    o.oob_ep = (uint32_t)r;
    return o;
}

typedef struct {
    ucc_context_h ctx;
    ucc_team_h team;
    int r, n;
    const char *name;
} team_t;

static int cb_count;
static void on_done(void *data, ucc_status_t st)
{
    if (st == UCC_OK) (*(int *)data)++;
}

static void wait_req(team_t *T, ucc_coll_req_h req)
{
    ucc_status_t s;
    while ((s = ucc_collective_test(req)) == UCC_INPROGRESS) CHECK(ucc_context_progress(T->ctx));
    if (s != UCC_OK) FAIL("%s: collective failed: %s", T->name, ucc_status_string(s));
}

/* Runs one iteration: persistent requests are made at it 0 and posted every time. */
static void go(team_t *T, ucc_coll_args_t *a, int pers, ucc_coll_req_h *req, int it)
{
    if (pers) a->flags |= UCC_COLL_ARGS_FLAG_PERSISTENT;
    a->mask |= UCC_COLL_ARGS_FIELD_FLAGS;
    if (!pers || it == 0) CHECK(ucc_collective_init(a, req, T->team));
    CHECK(ucc_collective_post(*req));
    wait_req(T, *req);
    if (!pers) CHECK(ucc_collective_finalize(*req));
}

static void done(int pers, ucc_coll_req_h req)
{
    if (pers) CHECK(ucc_collective_finalize(req));
}

#define ITERS(p) ((p) ? 3 : 1)
#define V(rank, i, it) ((int32_t)((rank) * 1000 + (i) + (it) * 7))
#define IP(ip) ((ip) ? UCC_COLL_ARGS_FLAG_IN_PLACE : 0)

static void buf(ucc_coll_buffer_info_t *b, void *p, uint64_t count, ucc_datatype_t dt)
{
    b->buffer = p;
    b->count = count;
    b->datatype = dt;
    b->mem_type = UCC_MEMORY_TYPE_HOST;
}

static void bufv(ucc_coll_buffer_info_v_t *b, void *p, uint32_t *c, uint32_t *d,
                 ucc_datatype_t dt)
{
    b->buffer = p;
    b->counts = (ucc_count_t *)c;
    b->displacements = (ucc_aint_t *)d;
    b->datatype = dt;
    b->mem_type = UCC_MEMORY_TYPE_HOST;
}

static void t_barrier(team_t *T, int ip, int pers)
{
    ucc_coll_req_h req = NULL;
    (void)ip;
    for (int it = 0; it < ITERS(pers); it++) {
        ucc_coll_args_t a = {0};
        a.coll_type = UCC_COLL_TYPE_BARRIER;
        go(T, &a, pers, &req, it);
    }
    done(pers, req);
}

static void t_bcast(team_t *T, int ip, int pers)
{
    enum { N = 1000 };
    int32_t *b = malloc(N * 4);
    ucc_coll_req_h req = NULL;
    int root = T->n - 1;
    (void)ip;
    ucc_coll_args_t a = {0};
    a.coll_type = UCC_COLL_TYPE_BCAST;
    a.root = root;
    buf(&a.src.info, b, N, UCC_DT_INT32);
    for (int it = 0; it < ITERS(pers); it++) {
        for (int i = 0; i < N; i++) b[i] = T->r == root ? V(root, i, it) : -1;
        go(T, &a, pers, &req, it);
        for (int i = 0; i < N; i++)
            if (b[i] != V(root, i, it)) FAIL("%s bcast[%d]=%d", T->name, i, b[i]);
    }
    done(pers, req);
    free(b);
}

static void t_allreduce(team_t *T, int ip, int pers)
{
    enum { N = 1037 };
    int32_t *s = malloc(N * 4), *d = malloc(N * 4);
    double *fs = malloc(N * 8), *fd = malloc(N * 8);
    ucc_coll_req_h req = NULL, req2 = NULL;
    ucc_coll_args_t a = {0}, f = {0};
    a.coll_type = f.coll_type = UCC_COLL_TYPE_ALLREDUCE;
    a.flags = f.flags = IP(ip);
    a.op = UCC_OP_SUM;
    f.op = UCC_OP_MAX;
    buf(&a.src.info, s, N, UCC_DT_INT32);
    buf(&a.dst.info, d, N, UCC_DT_INT32);
    buf(&f.src.info, fs, N, UCC_DT_FLOAT64);
    buf(&f.dst.info, fd, N, UCC_DT_FLOAT64);
    for (int it = 0; it < ITERS(pers); it++) {
        for (int i = 0; i < N; i++) {
            s[i] = V(T->r, i, it);
            d[i] = ip ? s[i] : -1;
            fs[i] = T->r * 0.5 + i + it;
            fd[i] = ip ? fs[i] : -1;
        }
        go(T, &a, pers, &req, it);
        go(T, &f, pers, &req2, it);
        for (int i = 0; i < N; i++) {
            int32_t want = 0;
            for (int q = 0; q < T->n; q++) want += V(q, i, it);
            if (d[i] != want) FAIL("%s allreduce[%d]=%d want %d", T->name, i, d[i], want);
            if (fd[i] != (T->n - 1) * 0.5 + i + it) FAIL("%s allreduce max[%d]=%g", T->name, i, fd[i]);
        }
    }
    done(pers, req);
    done(pers, req2);
    free(s); free(d); free(fs); free(fd);
}

static void t_reduce(team_t *T, int ip, int pers)
{
    enum { N = 333 };
    int32_t *s = malloc(N * 4), *d = malloc(N * 4);
    int root = T->n / 2, me_root = T->r == root;
    ucc_coll_req_h req = NULL;
    ucc_coll_args_t a = {0};
    a.coll_type = UCC_COLL_TYPE_REDUCE;
    a.root = root;
    a.op = UCC_OP_SUM;
    a.flags = (ip && me_root) ? UCC_COLL_ARGS_FLAG_IN_PLACE : 0;
    buf(&a.src.info, s, N, UCC_DT_INT32);
    buf(&a.dst.info, d, N, UCC_DT_INT32);
    for (int it = 0; it < ITERS(pers); it++) {
        for (int i = 0; i < N; i++) {
            s[i] = V(T->r, i, it);
            d[i] = (ip && me_root) ? s[i] : -1;
        }
        go(T, &a, pers, &req, it);
        if (me_root)
            for (int i = 0; i < N; i++) {
                int32_t want = 0;
                for (int q = 0; q < T->n; q++) want += V(q, i, it);
                if (d[i] != want) FAIL("%s reduce[%d]=%d want %d", T->name, i, d[i], want);
            }
    }
    done(pers, req);
    free(s); free(d);
}

static void t_allgather(team_t *T, int ip, int pers)
{
    enum { B = 5 };
    int n = T->n;
    int32_t *s = malloc(B * 4), *d = malloc(B * 4 * n);
    ucc_coll_req_h req = NULL;
    ucc_coll_args_t a = {0};
    a.coll_type = UCC_COLL_TYPE_ALLGATHER;
    a.flags = IP(ip);
    buf(&a.src.info, s, B, UCC_DT_INT32);
    buf(&a.dst.info, d, B * n, UCC_DT_INT32);
    for (int it = 0; it < ITERS(pers); it++) {
        for (int i = 0; i < B * n; i++) d[i] = -1;
        for (int i = 0; i < B; i++) {
            s[i] = V(T->r, i, it);
            if (ip) d[T->r * B + i] = s[i];
        }
        go(T, &a, pers, &req, it);
        for (int q = 0; q < n; q++)
            for (int i = 0; i < B; i++)
                if (d[q * B + i] != V(q, i, it)) FAIL("%s allgather[%d][%d]", T->name, q, i);
    }
    done(pers, req);
    free(s); free(d);
}

static void t_allgatherv(team_t *T, int ip, int pers)
{
    int n = T->n;
    uint32_t c[64], dsp[64], tot = 0;
    for (int q = 0; q < n; q++) {
        c[q] = q + 1;
        dsp[q] = tot + 1; /* a gap of one element before each block */
        tot += c[q] + 1;
    }
    int32_t *s = malloc(c[T->r] * 4), *d = malloc(tot * 4);
    ucc_coll_req_h req = NULL;
    ucc_coll_args_t a = {0};
    a.coll_type = UCC_COLL_TYPE_ALLGATHERV;
    a.flags = IP(ip);
    buf(&a.src.info, s, c[T->r], UCC_DT_INT32);
    bufv(&a.dst.info_v, d, c, dsp, UCC_DT_INT32);
    for (int it = 0; it < ITERS(pers); it++) {
        for (uint32_t i = 0; i < tot; i++) d[i] = -1;
        for (uint32_t i = 0; i < c[T->r]; i++) {
            s[i] = V(T->r, i, it);
            if (ip) d[dsp[T->r] + i] = s[i];
        }
        go(T, &a, pers, &req, it);
        for (int q = 0; q < n; q++) {
            if (d[dsp[q] - 1] != -1) FAIL("%s allgatherv wrote a gap", T->name);
            for (uint32_t i = 0; i < c[q]; i++)
                if (d[dsp[q] + i] != V(q, i, it)) FAIL("%s allgatherv[%d][%u]", T->name, q, i);
        }
    }
    done(pers, req);
    free(s); free(d);
}

#define A2A(src, dst, k, it) ((int32_t)((src) * 10000 + (dst) * 100 + (k) + (it) * 3))

static void t_alltoall(team_t *T, int ip, int pers)
{
    enum { B = 3 };
    int n = T->n;
    int32_t *s = malloc(B * 4 * n), *d = malloc(B * 4 * n);
    ucc_coll_req_h req = NULL;
    ucc_coll_args_t a = {0};
    a.coll_type = UCC_COLL_TYPE_ALLTOALL;
    a.flags = IP(ip);
    buf(&a.src.info, s, B * n, UCC_DT_INT32);
    buf(&a.dst.info, d, B * n, UCC_DT_INT32);
    for (int it = 0; it < ITERS(pers); it++) {
        for (int q = 0; q < n; q++)
            for (int k = 0; k < B; k++) {
                s[q * B + k] = A2A(T->r, q, k, it);
                d[q * B + k] = ip ? s[q * B + k] : -1;
            }
        go(T, &a, pers, &req, it);
        for (int q = 0; q < n; q++)
            for (int k = 0; k < B; k++)
                if (d[q * B + k] != A2A(q, T->r, k, it)) FAIL("%s alltoall[%d][%d]", T->name, q, k);
    }
    done(pers, req);
    free(s); free(d);
}

static void t_alltoallv(team_t *T, int ip, int pers)
{
    int n = T->n, r = T->r;
    uint32_t sc[64], sd[64], rc[64], rd[64], st = 0, rt = 0;
    (void)ip; /* in-place alltoallv is tested through equal counts below */
    for (int q = 0; q < n; q++) {
        sc[q] = q + 1; /* rank r sends q+1 elements to q */
        sd[q] = st;
        st += sc[q];
        rc[q] = r + 1; /* and receives r+1 from everyone */
        rd[q] = rt;
        rt += rc[q];
    }
    int32_t *s = malloc(st * 4), *d = malloc(rt * 4);
    ucc_coll_req_h req = NULL;
    ucc_coll_args_t a = {0};
    a.coll_type = UCC_COLL_TYPE_ALLTOALLV;
    bufv(&a.src.info_v, s, sc, sd, UCC_DT_INT32);
    bufv(&a.dst.info_v, d, rc, rd, UCC_DT_INT32);
    for (int it = 0; it < ITERS(pers); it++) {
        for (int q = 0; q < n; q++)
            for (uint32_t k = 0; k < sc[q]; k++) s[sd[q] + k] = A2A(r, q, k, it);
        for (uint32_t i = 0; i < rt; i++) d[i] = -1;
        go(T, &a, pers, &req, it);
        for (int q = 0; q < n; q++)
            for (uint32_t k = 0; k < rc[q]; k++)
                if (d[rd[q] + k] != A2A(q, r, k, it)) FAIL("%s alltoallv[%d][%u]", T->name, q, k);
    }
    done(pers, req);
    free(s); free(d);
    if (ip) {
        /* In place: equal counts, data exchanged within the destination. */
        uint32_t c[64], dd[64];
        int32_t *x = malloc(2 * 4 * n);
        for (int q = 0; q < n; q++) { c[q] = 2; dd[q] = 2 * q; }
        ucc_coll_args_t b = {0};
        b.coll_type = UCC_COLL_TYPE_ALLTOALLV;
        b.flags = UCC_COLL_ARGS_FLAG_IN_PLACE;
        bufv(&b.dst.info_v, x, c, dd, UCC_DT_INT32);
        req = NULL;
        for (int it = 0; it < ITERS(pers); it++) {
            for (int q = 0; q < n; q++)
                for (int k = 0; k < 2; k++) x[2 * q + k] = A2A(r, q, k, it);
            go(T, &b, pers, &req, it);
            for (int q = 0; q < n; q++)
                for (int k = 0; k < 2; k++)
                    if (x[2 * q + k] != A2A(q, r, k, it)) FAIL("%s alltoallv in place", T->name);
        }
        done(pers, req);
        free(x);
    }
}

static void t_reduce_scatter(team_t *T, int ip, int pers)
{
    enum { B = 4 };
    int n = T->n, r = T->r;
    int32_t *s = malloc(B * n * 4), *d = malloc(B * n * 4);
    ucc_coll_req_h req = NULL;
    ucc_coll_args_t a = {0};
    a.coll_type = UCC_COLL_TYPE_REDUCE_SCATTER;
    a.op = UCC_OP_SUM;
    a.flags = IP(ip);
    buf(&a.src.info, s, B * n, UCC_DT_INT32);
    buf(&a.dst.info, d, ip ? B * n : B, UCC_DT_INT32);
    for (int it = 0; it < ITERS(pers); it++) {
        for (int i = 0; i < B * n; i++) {
            s[i] = V(r, i, it);
            d[i] = ip ? s[i] : -1;
        }
        go(T, &a, pers, &req, it);
        /* In place, UCC leaves rank r's block at position r of the vector. */
        int32_t *got = ip ? d + r * B : d;
        for (int k = 0; k < B; k++) {
            int32_t want = 0;
            for (int q = 0; q < n; q++) want += V(q, r * B + k, it);
            if (got[k] != want) FAIL("%s reduce_scatter[%d]=%d want %d", T->name, k, got[k], want);
        }
    }
    done(pers, req);
    free(s); free(d);
}

static void t_reduce_scatterv(team_t *T, int ip, int pers)
{
    int n = T->n, r = T->r;
    uint32_t c[64], dsp[64], tot = 0, off = 0;
    for (int q = 0; q < n; q++) {
        c[q] = q + 2;
        dsp[q] = 0;
        if (q < r) off += c[q];
        tot += c[q];
    }
    int32_t *s = malloc(tot * 4), *d = malloc(tot * 4);
    ucc_coll_req_h req = NULL;
    ucc_coll_args_t a = {0};
    a.coll_type = UCC_COLL_TYPE_REDUCE_SCATTERV;
    a.op = UCC_OP_SUM;
    a.flags = IP(ip);
    buf(&a.src.info, s, tot, UCC_DT_INT32);
    bufv(&a.dst.info_v, d, c, dsp, UCC_DT_INT32);
    for (int it = 0; it < ITERS(pers); it++) {
        for (uint32_t i = 0; i < tot; i++) {
            s[i] = V(r, i, it);
            d[i] = ip ? s[i] : -1;
        }
        go(T, &a, pers, &req, it);
        int32_t *got = ip ? d + off : d;
        for (uint32_t k = 0; k < c[r]; k++) {
            int32_t want = 0;
            for (int q = 0; q < n; q++) want += V(q, off + k, it);
            if (got[k] != want) FAIL("%s reduce_scatterv[%u]=%d want %d", T->name, k, got[k], want);
        }
    }
    done(pers, req);
    free(s); free(d);
}

static void t_gather(team_t *T, int ip, int pers)
{
    enum { B = 2 };
    int n = T->n, r = T->r, root = n / 2, me_root = r == root;
    int32_t *s = malloc(B * 4), *d = malloc(B * n * 4);
    ucc_coll_req_h req = NULL;
    ucc_coll_args_t a = {0};
    a.coll_type = UCC_COLL_TYPE_GATHER;
    a.root = root;
    a.flags = (ip && me_root) ? UCC_COLL_ARGS_FLAG_IN_PLACE : 0;
    buf(&a.src.info, s, B, UCC_DT_INT32);
    buf(&a.dst.info, d, B * n, UCC_DT_INT32);
    for (int it = 0; it < ITERS(pers); it++) {
        for (int i = 0; i < B * n; i++) d[i] = -1;
        for (int k = 0; k < B; k++) {
            s[k] = V(r, k, it);
            if (ip && me_root) d[r * B + k] = s[k];
        }
        go(T, &a, pers, &req, it);
        if (me_root)
            for (int q = 0; q < n; q++)
                for (int k = 0; k < B; k++)
                    if (d[q * B + k] != V(q, k, it)) FAIL("%s gather[%d][%d]", T->name, q, k);
    }
    done(pers, req);
    free(s); free(d);
}

static void t_gatherv(team_t *T, int ip, int pers)
{
    int n = T->n, r = T->r, root = 0, me_root = r == root;
    uint32_t c[64], dsp[64], tot = 0;
    for (int q = 0; q < n; q++) {
        c[q] = 2 * q + 1;
        dsp[q] = tot;
        tot += c[q];
    }
    int32_t *s = malloc(c[r] * 4), *d = malloc(tot * 4);
    ucc_coll_req_h req = NULL;
    ucc_coll_args_t a = {0};
    a.coll_type = UCC_COLL_TYPE_GATHERV;
    a.root = root;
    a.flags = (ip && me_root) ? UCC_COLL_ARGS_FLAG_IN_PLACE : 0;
    buf(&a.src.info, s, c[r], UCC_DT_INT32);
    bufv(&a.dst.info_v, d, c, dsp, UCC_DT_INT32);
    for (int it = 0; it < ITERS(pers); it++) {
        for (uint32_t i = 0; i < tot; i++) d[i] = -1;
        for (uint32_t k = 0; k < c[r]; k++) {
            s[k] = V(r, k, it);
            if (ip && me_root) d[dsp[r] + k] = s[k];
        }
        go(T, &a, pers, &req, it);
        if (me_root)
            for (int q = 0; q < n; q++)
                for (uint32_t k = 0; k < c[q]; k++)
                    if (d[dsp[q] + k] != V(q, k, it)) FAIL("%s gatherv[%d][%u]", T->name, q, k);
    }
    done(pers, req);
    free(s); free(d);
}

static void t_scatter(team_t *T, int ip, int pers)
{
    enum { B = 3 };
    int n = T->n, r = T->r, root = n - 1, me_root = r == root;
    int32_t *s = malloc(B * n * 4), *d = malloc(B * 4);
    ucc_coll_req_h req = NULL;
    ucc_coll_args_t a = {0};
    a.coll_type = UCC_COLL_TYPE_SCATTER;
    a.root = root;
    a.flags = (ip && me_root) ? UCC_COLL_ARGS_FLAG_IN_PLACE : 0;
    buf(&a.src.info, s, B * n, UCC_DT_INT32);
    buf(&a.dst.info, d, B, UCC_DT_INT32);
    for (int it = 0; it < ITERS(pers); it++) {
        for (int i = 0; i < B * n; i++) s[i] = me_root ? V(i / B, i % B, it) : -1;
        for (int k = 0; k < B; k++) d[k] = -1;
        go(T, &a, pers, &req, it);
        int32_t *got = (ip && me_root) ? s + r * B : d;
        for (int k = 0; k < B; k++)
            if (got[k] != V(r, k, it)) FAIL("%s scatter[%d]=%d", T->name, k, got[k]);
    }
    done(pers, req);
    free(s); free(d);
}

static void t_scatterv(team_t *T, int ip, int pers)
{
    int n = T->n, r = T->r, root = 0, me_root = r == root;
    uint32_t c[64], dsp[64], tot = 0;
    for (int q = 0; q < n; q++) {
        c[q] = q + 1;
        dsp[q] = tot + 2;
        tot += c[q] + 2;
    }
    int32_t *s = malloc(tot * 4), *d = malloc(c[r] * 4);
    ucc_coll_req_h req = NULL;
    ucc_coll_args_t a = {0};
    a.coll_type = UCC_COLL_TYPE_SCATTERV;
    a.root = root;
    a.flags = (ip && me_root) ? UCC_COLL_ARGS_FLAG_IN_PLACE : 0;
    bufv(&a.src.info_v, s, c, dsp, UCC_DT_INT32);
    buf(&a.dst.info, d, c[r], UCC_DT_INT32);
    for (int it = 0; it < ITERS(pers); it++) {
        for (uint32_t i = 0; i < tot; i++) s[i] = -1;
        if (me_root)
            for (int q = 0; q < n; q++)
                for (uint32_t k = 0; k < c[q]; k++) s[dsp[q] + k] = V(q, k, it);
        for (uint32_t k = 0; k < c[r]; k++) d[k] = -1;
        go(T, &a, pers, &req, it);
        int32_t *got = (ip && me_root) ? s + dsp[r] : d;
        for (uint32_t k = 0; k < c[r]; k++)
            if (got[k] != V(r, k, it)) FAIL("%s scatterv[%u]=%d", T->name, k, got[k]);
    }
    done(pers, req);
    free(s); free(d);
}

typedef void (*test_fn)(team_t *, int, int);
static const struct {
    const char *name;
    test_fn fn;
} tests[] = {
    {"barrier", t_barrier},         {"bcast", t_bcast},
    {"allreduce", t_allreduce},     {"reduce", t_reduce},
    {"allgather", t_allgather},     {"allgatherv", t_allgatherv},
    {"alltoall", t_alltoall},       {"alltoallv", t_alltoallv},
    {"reduce_scatter", t_reduce_scatter}, {"reduce_scatterv", t_reduce_scatterv},
    {"gather", t_gather},           {"gatherv", t_gatherv},
    {"scatter", t_scatter},         {"scatterv", t_scatterv},
};

static void run_all(team_t *T)
{
    ucc_team_attr_t attr;
    memset(&attr, 0, sizeof(attr));
    attr.mask = UCC_TEAM_ATTR_FIELD_EP | UCC_TEAM_ATTR_FIELD_SIZE;
    CHECK(ucc_team_get_attr(T->team, &attr));
    if ((int)attr.ep != T->r || (int)attr.size != T->n)
        FAIL("%s: team attr ep %d size %u, expected %d of %d", T->name, (int)attr.ep, attr.size, T->r, T->n);
    for (size_t t = 0; t < sizeof(tests) / sizeof(tests[0]); t++)
        for (int ip = 0; ip < 2; ip++)
            for (int pers = 0; pers < 2; pers++) tests[t].fn(T, ip, pers);
}

static void wait_team(ucc_context_h ctx, ucc_team_h team)
{
    ucc_status_t s;
    while ((s = ucc_team_create_test(team)) == UCC_INPROGRESS) ucc_context_progress(ctx);
    CHECK(s);
}

static void negative(team_t *T)
{
    int32_t x[8] = {0}, y[8];
    ucc_coll_req_h req;
    ucc_coll_args_t a = {0};
    a.coll_type = UCC_COLL_TYPE_ALLREDUCE;
    a.op = UCC_OP_SUM;
    buf(&a.src.info, x, 8, UCC_DT_INT32);
    buf(&a.dst.info, y, 8, UCC_DT_INT32);
    a.dst.info.mem_type = UCC_MEMORY_TYPE_CUDA;
    EXPECT(ucc_collective_init(&a, &req, T->team), UCC_ERR_NOT_SUPPORTED);
    a.dst.info.mem_type = UCC_MEMORY_TYPE_HOST;
    a.op = UCC_OP_MINLOC;
    EXPECT(ucc_collective_init(&a, &req, T->team), UCC_ERR_NOT_SUPPORTED);
    a.op = UCC_OP_SUM;
    a.src.info.datatype = a.dst.info.datatype = UCC_DT_FLOAT128;
    EXPECT(ucc_collective_init(&a, &req, T->team), UCC_ERR_NOT_SUPPORTED);
    a.coll_type = UCC_COLL_TYPE_FANIN;
    EXPECT(ucc_collective_init(&a, &req, T->team), UCC_ERR_NOT_SUPPORTED);
    EXPECT(ucc_collective_init(&a, &req, NULL), UCC_ERR_INVALID_PARAM);
    EXPECT(ucc_collective_init(&a, &req, (ucc_team_h)T->ctx), UCC_ERR_INVALID_PARAM);
    EXPECT(ucc_collective_post(NULL), UCC_ERR_INVALID_PARAM);
    EXPECT(ucc_context_progress(NULL), UCC_ERR_INVALID_PARAM);
    /* A non-persistent request is posted once; a completion callback runs. */
    a.coll_type = UCC_COLL_TYPE_ALLREDUCE;
    a.src.info.datatype = a.dst.info.datatype = UCC_DT_INT32;
    a.mask = UCC_COLL_ARGS_FIELD_CB;
    a.cb.cb = on_done;
    a.cb.data = &cb_count;
    cb_count = 0;
    CHECK(ucc_collective_init_and_post(&a, &req, T->team));
    wait_req(T, req);
    if (cb_count != 1) FAIL("completion callback ran %d times", cb_count);
    EXPECT(ucc_collective_post(req), UCC_ERR_INVALID_PARAM);
    CHECK(ucc_collective_finalize(req));
    if (strcmp(ucc_status_string(UCC_ERR_NOT_SUPPORTED), "") == 0) FAIL("status string");
}

static void helpers(void)
{
    mc_header_t *h, *h2;
    size_t v = 0;
    if (strcmp(ucc_memory_type_names[UCC_MEMORY_TYPE_HOST], "host") != 0) FAIL("names");
    if (ucc_dt_predefined_sizes[UCC_DT_FLOAT64 >> 3] != 8 ||
        ucc_dt_predefined_sizes[UCC_DT_FLOAT128_COMPLEX >> 3] != 32)
        FAIL("dt sizes");
    CHECK(ucc_mc_available(UCC_MEMORY_TYPE_HOST));
    EXPECT(ucc_mc_available(UCC_MEMORY_TYPE_CUDA), UCC_ERR_NOT_SUPPORTED);
    EXPECT(ucc_mc_alloc(&h, 16, UCC_MEMORY_TYPE_CUDA), UCC_ERR_NOT_SUPPORTED);
    CHECK(ucc_mc_alloc(&h, 4096, UCC_MEMORY_TYPE_HOST));
    CHECK(ucc_mc_alloc(&h2, 4096, UCC_MEMORY_TYPE_HOST));
    if (h->mt != UCC_MEMORY_TYPE_HOST || h->addr == NULL) FAIL("mc header");
    CHECK(ucc_mc_memset(h->addr, 0x5a, 4096, UCC_MEMORY_TYPE_HOST));
    CHECK(ucc_mc_memcpy(h2->addr, h->addr, 4096, UCC_MEMORY_TYPE_HOST, UCC_MEMORY_TYPE_HOST));
    if (((unsigned char *)h2->addr)[4095] != 0x5a) FAIL("mc memcpy");
    CHECK(ucc_mc_free(h));
    CHECK(ucc_mc_free(h2));
    {
        eee_params_t ep = {1, UCC_EE_CPU_THREAD, 0};
        eee_t *e;
        eee_task_t *t;
        eee_args_t a;
        int32_t x[3][8], y[8];
        double fs[3 * 4], fd[4];
        ep.ee_type = UCC_EE_CUDA_STREAM;
        EXPECT(ucc_ee_executor_init(&ep, &e), UCC_ERR_NOT_SUPPORTED);
        ep.ee_type = UCC_EE_CPU_THREAD;
        CHECK(ucc_ee_executor_init(&ep, &e));
        EXPECT(ucc_ee_executor_status(e), UCC_OPERATION_INITIALIZED);
        CHECK(ucc_ee_executor_start(e, NULL));
        CHECK(ucc_ee_executor_status(e));
        for (int j = 0; j < 3; j++)
            for (int i = 0; i < 8; i++) x[j][i] = j * 10 + i;
        memset(&a, 0, sizeof(a));
        a.task_type = 1; /* reduce */
        a.reduce.dst = y;
        a.reduce.srcs[0] = x[0];
        a.reduce.srcs[1] = x[1];
        a.reduce.srcs[2] = x[2];
        a.reduce.n_srcs = 3;
        a.reduce.count = 8;
        a.reduce.dt = UCC_DT_INT32;
        a.reduce.op = UCC_OP_SUM;
        CHECK(ucc_ee_executor_task_post(e, &a, &t));
        CHECK(ucc_ee_executor_task_test(t));
        CHECK(ucc_ee_executor_task_finalize(t));
        for (int i = 0; i < 8; i++)
            if (y[i] != 30 + 3 * i) FAIL("executor reduce[%d]=%d", i, y[i]);
        for (int i = 0; i < 12; i++) fs[i] = i;
        memset(&a, 0, sizeof(a));
        a.task_type = 2; /* strided, with alpha */
        a.flags = 1;
        a.reduce_strided.dst = fd;
        a.reduce_strided.src1 = fs;
        a.reduce_strided.src2 = fs + 4;
        a.reduce_strided.stride = 4 * sizeof(double);
        a.reduce_strided.n_src2 = 2;
        a.reduce_strided.count = 4;
        a.reduce_strided.alpha = 0.5;
        a.reduce_strided.dt = UCC_DT_FLOAT64;
        a.reduce_strided.op = UCC_OP_AVG;
        CHECK(ucc_ee_executor_task_post(e, &a, &t));
        CHECK(ucc_ee_executor_task_finalize(t));
        for (int i = 0; i < 4; i++)
            if (fd[i] != (i + (i + 4) + (i + 8)) * 0.5) FAIL("executor strided[%d]=%g", i, fd[i]);
        memset(&a, 0, sizeof(a));
        a.task_type = 8; /* copy */
        a.copy.src = x[2];
        a.copy.dst = y;
        a.copy.len = sizeof(y);
        CHECK(ucc_ee_executor_task_post(e, &a, &t));
        CHECK(ucc_ee_executor_task_finalize(t));
        if (memcmp(x[2], y, sizeof(y)) != 0) FAIL("executor copy");
        CHECK(ucc_ee_executor_stop(e));
        CHECK(ucc_ee_executor_finalize(e));
        EXPECT(ucc_ee_executor_finalize(e), UCC_ERR_INVALID_PARAM);
    }
    CHECK(ucc_str_to_memunits("8k", &v));
    if (v != 8192) FAIL("memunits %zu", v);
    EXPECT(ucc_str_to_memunits("x1", &v), UCC_ERR_INVALID_PARAM);
}

static void run_once(team_t *T, ucc_coll_args_t *a)
{
    ucc_coll_req_h req;
    CHECK(ucc_collective_init(a, &req, T->team));
    CHECK(ucc_collective_post(req));
    wait_req(T, req);
    CHECK(ucc_collective_finalize(req));
}

/* Datatypes, operations and count widths beyond the main matrix. */
static void extras(team_t *T)
{
    int n = T->n, r = T->r;
    /* Integer sums of every width and signedness (small values, no overflow). */
    static const struct { ucc_datatype_t dt; size_t sz; int sgn; } ints[] = {
        {UCC_DT_INT8, 1, 1},  {UCC_DT_INT16, 2, 1},  {UCC_DT_INT32, 4, 1},  {UCC_DT_INT64, 8, 1},
        {UCC_DT_UINT8, 1, 0}, {UCC_DT_UINT16, 2, 0}, {UCC_DT_UINT32, 4, 0}, {UCC_DT_UINT64, 8, 0},
    };
    for (size_t k = 0; k < sizeof(ints) / sizeof(ints[0]); k++) {
        unsigned char s[8 * 8] = {0}, d[8 * 8] = {0};
        for (int i = 0; i < 8; i++) s[i * ints[k].sz] = (unsigned char)(r + i);
        ucc_coll_args_t a = {0};
        a.coll_type = UCC_COLL_TYPE_ALLREDUCE;
        a.op = UCC_OP_SUM;
        buf(&a.src.info, s, 8, ints[k].dt);
        buf(&a.dst.info, d, 8, ints[k].dt);
        run_once(T, &a);
        for (int i = 0; i < 8; i++) {
            int want = n * i + n * (n - 1) / 2;
            if (d[i * ints[k].sz] != (unsigned char)want) FAIL("int sum dt %zu [%d]", k, i);
        }
    }
    /* AVG and PROD on float32. */
    {
        float s[4], d[4];
        for (int i = 0; i < 4; i++) s[i] = (float)(r + i);
        ucc_coll_args_t a = {0};
        a.coll_type = UCC_COLL_TYPE_ALLREDUCE;
        a.op = UCC_OP_AVG;
        buf(&a.src.info, s, 4, UCC_DT_FLOAT32);
        buf(&a.dst.info, d, 4, UCC_DT_FLOAT32);
        run_once(T, &a);
        for (int i = 0; i < 4; i++)
            if (d[i] != (float)(n - 1) / 2 + i) FAIL("avg[%d]=%g", i, d[i]);
        for (int i = 0; i < 4; i++) s[i] = 2.0f;
        a.op = UCC_OP_PROD;
        run_once(T, &a);
        for (int i = 0; i < 4; i++)
            if (d[i] != (float)(1 << n)) FAIL("prod[%d]=%g", i, d[i]);
    }
    /* Bytes moved for types without reductions: bcast of complex doubles. */
    {
        double z[2 * 5];
        for (int i = 0; i < 10; i++) z[i] = r == 0 ? i * 1.5 : -1;
        ucc_coll_args_t a = {0};
        a.coll_type = UCC_COLL_TYPE_BCAST;
        a.root = 0;
        buf(&a.src.info, z, 5, UCC_DT_FLOAT64_COMPLEX);
        run_once(T, &a);
        for (int i = 0; i < 10; i++)
            if (z[i] != i * 1.5) FAIL("complex bcast[%d]", i);
    }
    /* 64-bit counts and displacements. */
    {
        uint64_t c[64], dsp[64], tot = 0;
        for (int q = 0; q < n; q++) {
            c[q] = q + 1;
            dsp[q] = tot;
            tot += c[q];
        }
        int64_t *s = malloc(c[r] * 8), *d = malloc(tot * 8);
        for (uint64_t k = 0; k < c[r]; k++) s[k] = r * 100 + (int64_t)k;
        ucc_coll_args_t a = {0};
        a.mask = UCC_COLL_ARGS_FIELD_FLAGS;
        a.flags = UCC_COLL_ARGS_FLAG_COUNT_64BIT | UCC_COLL_ARGS_FLAG_DISPLACEMENTS_64BIT;
        a.coll_type = UCC_COLL_TYPE_ALLGATHERV;
        buf(&a.src.info, s, c[r], UCC_DT_INT64);
        a.dst.info_v.buffer = d;
        a.dst.info_v.counts = c;
        a.dst.info_v.displacements = dsp;
        a.dst.info_v.datatype = UCC_DT_INT64;
        a.dst.info_v.mem_type = UCC_MEMORY_TYPE_HOST;
        run_once(T, &a);
        for (int q = 0; q < n; q++)
            for (uint64_t k = 0; k < c[q]; k++)
                if (d[dsp[q] + k] != q * 100 + (int64_t)k) FAIL("64-bit allgatherv");
        free(s);
        free(d);
    }
    /* A total that does not divide among the ranks. */
    if (n > 1) {
        int32_t x[64], y[64];
        ucc_coll_req_h req;
        ucc_coll_args_t a = {0};
        a.coll_type = UCC_COLL_TYPE_ALLTOALL;
        buf(&a.src.info, x, n + 1, UCC_DT_INT32);
        buf(&a.dst.info, y, n + 1, UCC_DT_INT32);
        EXPECT(ucc_collective_init(&a, &req, T->team), UCC_ERR_INVALID_PARAM);
    }
}

/* Events with host semantics: a triggered post on a CPU-thread engine reports the post
   and then the completion. */
static void events(team_t *T)
{
    ucc_ee_h ee;
    ucc_ee_params_t ep = {UCC_EE_CUDA_STREAM, NULL, 0};
    int32_t s[16], d[16];
    ucc_coll_req_h req;
    ucc_ev_t trig, *ev, got;
    EXPECT(ucc_ee_create(T->team, &ep, &ee), UCC_ERR_NOT_SUPPORTED);
    ep.ee_type = UCC_EE_CPU_THREAD;
    CHECK(ucc_ee_create(T->team, &ep, &ee));
    EXPECT(ucc_ee_get_event(ee, &ev), UCC_ERR_NOT_FOUND);
    for (int i = 0; i < 16; i++) s[i] = T->r + i;
    ucc_coll_args_t a = {0};
    a.coll_type = UCC_COLL_TYPE_ALLREDUCE;
    a.op = UCC_OP_MAX;
    buf(&a.src.info, s, 16, UCC_DT_INT32);
    buf(&a.dst.info, d, 16, UCC_DT_INT32);
    CHECK(ucc_collective_init(&a, &req, T->team));
    memset(&trig, 0, sizeof(trig));
    trig.ev_type = UCC_EVENT_COMPUTE_COMPLETE;
    trig.req = req;
    CHECK(ucc_ee_set_event(ee, &trig));
    CHECK(ucc_collective_triggered_post(ee, &trig));
    CHECK(ucc_ee_get_event(ee, &ev));
    if (ev->ev_type != UCC_EVENT_COLLECTIVE_POST || ev->req != req) FAIL("post event");
    CHECK(ucc_ee_ack_event(ee, ev));
    CHECK(ucc_ee_wait(ee, &got));
    if (got.ev_type != UCC_EVENT_COLLECTIVE_COMPLETE || got.req != req) FAIL("complete event");
    if (ucc_collective_test(req) != UCC_OK) FAIL("triggered collective status");
    for (int i = 0; i < 16; i++)
        if (d[i] != T->n - 1 + i) FAIL("triggered allreduce[%d]=%d", i, d[i]);
    CHECK(ucc_collective_finalize(req));
    CHECK(ucc_ee_destroy(ee));
    EXPECT(ucc_ee_destroy(ee), UCC_ERR_INVALID_PARAM);
}

int main(int argc, char **argv)
{
    int n;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);

    helpers();
    ucc_lib_config_h lcfg;
    ucc_lib_h lib;
    ucc_lib_params_t lp;
    memset(&lp, 0, sizeof(lp));
    lp.mask = UCC_LIB_PARAM_FIELD_THREAD_MODE;
    lp.thread_mode = UCC_THREAD_SINGLE;
    CHECK(ucc_lib_config_read("TEST", NULL, &lcfg));
    EXPECT(ucc_lib_config_modify(lcfg, "NO_SUCH_OPTION", "1"), UCC_ERR_NOT_FOUND);
    CHECK(ucc_init(&lp, lcfg, &lib));
    ucc_lib_config_release(lcfg);
    EXPECT(ucc_init_version(2, 0, &lp, NULL, &lib), UCC_ERR_NOT_SUPPORTED);

    ucc_lib_attr_t la;
    memset(&la, 0, sizeof(la));
    la.mask = UCC_LIB_ATTR_FIELD_COLL_TYPES | UCC_LIB_ATTR_FIELD_REDUCTION_TYPES;
    CHECK(ucc_lib_get_attr(lib, &la));
    if (!(la.coll_types & UCC_COLL_TYPE_ALLREDUCE) || (la.coll_types & UCC_COLL_TYPE_FANIN) ||
        !(la.reduction_types & (1ul << UCC_OP_SUM)))
        FAIL("lib attr");

    ucc_context_config_h ccfg;
    CHECK(ucc_context_config_read(lib, NULL, &ccfg));
    CHECK(ucc_context_config_modify(ccfg, NULL, "ESTIMATED_NUM_EPS", "4"));
    EXPECT(ucc_context_config_modify(ccfg, NULL, "NO_SUCH_OPTION", "1"), UCC_ERR_NOT_FOUND);
    {
        char text[512] = {0};
        FILE *f = fmemopen(text, sizeof(text) - 1, "w");
        ucc_context_config_print(ccfg, f, "test", UCC_CONFIG_PRINT_CONFIG | UCC_CONFIG_PRINT_HEADER);
        fclose(f);
        if (!strstr(text, "UCC_ESTIMATED_NUM_EPS=4")) FAIL("config print: %s", text);
    }

    ucc_context_params_t cp;
    memset(&cp, 0, sizeof(cp));
    cp.mask = UCC_CONTEXT_PARAM_FIELD_OOB;
    cp.oob = oob_of(MPI_COMM_WORLD);
    ucc_context_h ctx;
    CHECK(ucc_context_create(lib, &cp, ccfg, &ctx));
    ucc_context_config_release(ccfg);

    ucc_context_attr_t ca;
    memset(&ca, 0, sizeof(ca));
    ca.mask = UCC_CONTEXT_ATTR_FIELD_CTX_ADDR | UCC_CONTEXT_ATTR_FIELD_CTX_ADDR_LEN;
    CHECK(ucc_context_get_attr(ctx, &ca));
    if (ca.ctx_addr == NULL || ca.ctx_addr_len == 0) FAIL("context attr");

    /* World team through a team OOB. */
    ucc_team_params_t tp;
    memset(&tp, 0, sizeof(tp));
    tp.mask = UCC_TEAM_PARAM_FIELD_OOB | UCC_TEAM_PARAM_FIELD_EP;
    tp.oob = oob_of(MPI_COMM_WORLD);
    tp.ep = wrank;
    team_t world = {ctx, NULL, wrank, n, "world"};
    CHECK(ucc_team_create_post(&ctx, 1, &tp, &world.team));
    wait_team(ctx, world.team);
    run_all(&world);
    negative(&world);
    events(&world);
    extras(&world);

    /* Split team: even and odd world ranks, through the sub-communicator's OOB. */
    MPI_Comm sub;
    MPI_Comm_split(MPI_COMM_WORLD, wrank % 2, wrank, &sub);
    team_t half = {ctx, NULL, 0, 0, "split"};
    MPI_Comm_rank(sub, &half.r);
    MPI_Comm_size(sub, &half.n);
    memset(&tp, 0, sizeof(tp));
    tp.mask = UCC_TEAM_PARAM_FIELD_OOB;
    tp.oob = oob_of(sub);
    CHECK(ucc_team_create_post(&ctx, 1, &tp, &half.team));
    wait_team(ctx, half.team);
    run_all(&half);

    /* Reversed team from the context's endpoints: a strided ep map. */
    memset(&tp, 0, sizeof(tp));
    tp.mask = UCC_TEAM_PARAM_FIELD_EP_MAP | UCC_TEAM_PARAM_FIELD_EP | UCC_TEAM_PARAM_FIELD_TEAM_SIZE;
    tp.ep_map.type = UCC_EP_MAP_STRIDED;
    tp.ep_map.ep_num = n;
    tp.ep_map.strided.start = n - 1;
    tp.ep_map.strided.stride = -1;
    tp.ep = n - 1 - wrank;
    tp.team_size = n;
    team_t rev = {ctx, NULL, n - 1 - wrank, n, "reversed"};
    CHECK(ucc_team_create_post(&ctx, 1, &tp, &rev.team));
    wait_team(ctx, rev.team);
    run_all(&rev);
    extras(&rev);

    /* A team from its parent: every world rank but the first. */
    team_t sub0 = {ctx, NULL, wrank - 1, n - 1, "from_parent"};
    CHECK(ucc_team_create_from_parent(wrank, wrank != 0, world.team, &sub0.team));
    if (wrank == 0) {
        if (sub0.team != NULL) FAIL("excluded rank got a team");
    } else {
        wait_team(ctx, sub0.team);
        run_all(&sub0);
        CHECK(ucc_team_destroy(sub0.team));
    }

    EXPECT(ucc_context_destroy(ctx), UCC_ERR_INVALID_PARAM); /* teams still alive */
    CHECK(ucc_team_destroy(rev.team));
    CHECK(ucc_team_destroy(half.team));
    CHECK(ucc_team_destroy(world.team));
    EXPECT(ucc_team_destroy(world.team), UCC_ERR_INVALID_PARAM);
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(ucc_context_destroy(ctx));
    CHECK(ucc_finalize(lib));
    MPI_Comm_free(&sub);
    MPI_Barrier(MPI_COMM_WORLD);
    if (wrank == 0) printf("UCC_MPI_OK np=%d\n", n);
    MPI_Finalize();
    return 0;
}
