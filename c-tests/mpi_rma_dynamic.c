/* MPI dynamic windows over osc ucx: memory attached at any time after
 * MPI_Win_create_dynamic (heap, mmap, stack-less page-aligned and odd addresses, memory
 * from MPI_Alloc_mem, several regions at once, detach and re-attach), reached by
 * MPI_Put / MPI_Get / MPI_Accumulate / MPI_Fetch_and_op / MPI_Compare_and_swap under
 * fence, lock and lock_all epochs. Every byte put or got is checked.
 * Runs on any number of ranks >= 2; the argument "no-hole" skips part 1 (see main). */
#include "mpi_common.h"
#include <stdint.h>
#include <sys/mman.h>
#include <mpi.h>

static int rank, size, next, prev;

enum { NREG = 6 };

struct region {
    unsigned char *mem;
    size_t len;
    int kind; /* 0 malloc, 1 mmap, 2 MPI_Alloc_mem */
};

static void region_alloc(struct region *r, size_t len, int kind)
{
    r->len = len;
    r->kind = kind;
    if (kind == 0) {
        /* odd address: one byte into a malloc'ed block */
        unsigned char *p = malloc(len + 1);
        EXPECT(p != NULL, "malloc");
        r->mem = p + 1;
    } else if (kind == 1) {
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        EXPECT(p != MAP_FAILED, "mmap");
        r->mem = p;
    } else {
        void *p = NULL;
        EXPECT(MPI_Alloc_mem((MPI_Aint)len, MPI_INFO_NULL, &p) == MPI_SUCCESS, "MPI_Alloc_mem");
        r->mem = p;
    }
}

static void region_free(struct region *r)
{
    if (r->kind == 0) {
        free(r->mem - 1);
    } else if (r->kind == 1) {
        munmap(r->mem, r->len);
    } else {
        MPI_Free_mem(r->mem);
    }
}

/* Every rank's address of its region, gathered. */
static MPI_Aint *gather_addr(void *p)
{
    MPI_Aint a, *all = malloc(sizeof(MPI_Aint) * size);
    MPI_Get_address(p, &a);
    MPI_Allgather(&a, 1, MPI_AINT, all, 1, MPI_AINT, MPI_COMM_WORLD);
    return all;
}

/* Put `len` bytes of pattern into `next`'s region at `off` under `sync` (0 fence, 1 lock,
 * 2 lock_all), check what `prev` put into ours, get it back and check it. */
static void put_get(MPI_Win win, struct region *r, MPI_Aint *addrs, size_t off, size_t len,
                    int sync, unsigned seed, const char *what)
{
    unsigned char *src = malloc(len), *got = malloc(len);
    for (size_t i = 0; i < len; i++) {
        src[i] = pat(i, seed + (unsigned)rank);
        got[i] = 0;
    }
    memset(r->mem, 0xee, r->len);
    MPI_Barrier(MPI_COMM_WORLD);
    if (sync == 0) {
        MPI_Win_fence(0, win);
        MPI_Put(src, (int)len, MPI_BYTE, next, addrs[next] + (MPI_Aint)off, (int)len, MPI_BYTE,
                win);
        MPI_Win_fence(0, win);
    } else if (sync == 1) {
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, next, 0, win);
        MPI_Put(src, (int)len, MPI_BYTE, next, addrs[next] + (MPI_Aint)off, (int)len, MPI_BYTE,
                win);
        MPI_Win_unlock(next, win);
    } else {
        MPI_Win_lock_all(0, win);
        MPI_Put(src, (int)len, MPI_BYTE, next, addrs[next] + (MPI_Aint)off, (int)len, MPI_BYTE,
                win);
        MPI_Win_flush_all(win);
        MPI_Win_unlock_all(win);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    for (size_t i = 0; i < r->len; i++) {
        unsigned char want = (i >= off && i < off + len) ? pat(i - off, seed + (unsigned)prev)
                                                         : 0xee;
        EXPECT(r->mem[i] == want, "%s: byte %zu of the region is %#x, not %#x", what, i,
               r->mem[i], want);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock(MPI_LOCK_SHARED, next, 0, win);
    MPI_Get(got, (int)len, MPI_BYTE, next, addrs[next] + (MPI_Aint)off, (int)len, MPI_BYTE, win);
    MPI_Win_unlock(next, win);
    for (size_t i = 0; i < len; i++) {
        EXPECT(got[i] == src[i], "%s: got byte %zu = %#x, not %#x", what, i, got[i], src[i]);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    /* Leave no pattern bytes in freed heap memory: Open MPI 4.1's lookup bug (see main)
     * reads the heap in front of its lookup buffer as a packed key. */
    memset(src, 0, len);
    memset(got, 0, len);
    free(src);
    free(got);
}

static void atomics(MPI_Win win, struct region *r, MPI_Aint *addrs, const char *what)
{
    /* rank 0's region: a counter at offset 0 (8-aligned for the mmap/alloc kinds; the
     * malloc kind is checked on an aligned address inside the region) */
    size_t off = (8 - ((uintptr_t)r->mem & 7)) & 7;
    int64_t *ctr, one = 1, old = -1, cmp = 0, mine = rank + 1;
    MPI_Aint *offs = malloc(sizeof(MPI_Aint) * size);
    MPI_Aint o = (MPI_Aint)off;
    MPI_Allgather(&o, 1, MPI_AINT, offs, 1, MPI_AINT, MPI_COMM_WORLD);
    ctr = (int64_t *)(r->mem + off);
    ctr[0] = 0;
    ctr[1] = 0;
    ctr[2] = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < 8; i++) {
        MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
        MPI_Fetch_and_op(&one, &old, MPI_INT64_T, 0, addrs[0] + offs[0], MPI_SUM, win);
        MPI_Win_unlock(0, win);
        EXPECT(old >= 0 && old < 8 * size, "%s: fetch_and_op returned %lld", what,
               (long long)old);
    }
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
    MPI_Compare_and_swap(&mine, &cmp, &old, MPI_INT64_T, 0, addrs[0] + offs[0] + 8, win);
    MPI_Win_unlock(0, win);
    {
        int won = old == 0, winners = 0;
        MPI_Allreduce(&won, &winners, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        EXPECT(winners == 1, "%s: %d ranks won the compare-and-swap", what, winners);
    }
    MPI_Win_fence(0, win);
    MPI_Accumulate(&mine, 1, MPI_INT64_T, 0, addrs[0] + offs[0] + 16, 1, MPI_INT64_T, MPI_SUM,
                   win);
    MPI_Win_fence(0, win);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        EXPECT(ctr[0] == 8 * size, "%s: counter %lld", what, (long long)ctr[0]);
        EXPECT(ctr[1] >= 1 && ctr[1] <= size, "%s: cswap slot %lld", what, (long long)ctr[1]);
        EXPECT(ctr[2] == (int64_t)size * (size + 1) / 2, "%s: accumulate %lld", what,
               (long long)ctr[2]);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    free(offs);
}

static int by_address_desc(const void *a, const void *b)
{
    const struct region *x = *(struct region *const *)a, *y = *(struct region *const *)b;
    return x->mem < y->mem ? 1 : x->mem > y->mem ? -1 : 0;
}

int main(int argc, char **argv)
{
    MPI_Win win;
    struct region two[2], reg[NREG], *order[NREG];
    MPI_Aint *addrs[NREG], *two_addrs[2];
    static const size_t lens[NREG] = {4096, 1 << 20, 65536, 100, 3 << 20, 8192};
    static const int kinds[NREG] = {0, 1, 2, 0, 1, 2};
    char what[64];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    EXPECT(size >= 2, "needs at least 2 ranks");
    next = (rank + 1) % size;
    prev = (rank + size - 1) % size;
    check_rucx_loaded(rank == 0);

    /* 1. Two regions attached in increasing address order (heap, then a higher mmap), the
     * window used before and between the attaches. Open MPI 4.1's osc ucx then keeps a
     * hole in its table of attached regions, and an origin looking up the lower region
     * hands ucp_ep_rkey_unpack the bytes in front of its lookup buffer (zeros, usually):
     * the empty key, which UCX accepts and rucx must too. Over TCP the bytes there are
     * often a transport's receive buffer instead, and the lookup fails with UCX too: the
     * argument "no-hole" skips this part. */
    if (argc > 1 && strcmp(argv[1], "no-hole") == 0) {
        goto exact;
    }
    MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Win_fence(0, win);
    MPI_Win_fence(0, win);
    region_alloc(&two[0], 4096, 0);
    EXPECT(MPI_Win_attach(win, two[0].mem, 4096) == MPI_SUCCESS, "attach");
    two_addrs[0] = gather_addr(two[0].mem);
    put_get(win, &two[0], two_addrs[0], 0, 4096, 0, 1, "first region");
    region_alloc(&two[1], 1 << 20, 1);
    EXPECT(two[1].mem > two[0].mem, "mmap below the heap");
    EXPECT(MPI_Win_attach(win, two[1].mem, 1 << 20) == MPI_SUCCESS, "attach");
    two_addrs[1] = gather_addr(two[1].mem);
    for (int s = 0; s < 3; s++) {
        put_get(win, &two[1], two_addrs[1], 5, (1 << 20) - 9, s, 10u + (unsigned)s,
                "second region");
        put_get(win, &two[0], two_addrs[0], 1, 4093, s, 20u + (unsigned)s,
                "first region after the second attach");
    }
    MPI_Win_fence(0, win);
    for (int k = 0; k < 2; k++) {
        MPI_Win_detach(win, two[k].mem);
    }
    MPI_Win_free(&win);
    for (int k = 0; k < 2; k++) {
        region_free(&two[k]);
        free(two_addrs[k]);
    }
    if (rank == 0) {
        printf("two regions attached in increasing address order: put/get: ok\n");
    }

exact:
    /* 2. Six regions of every kind and alignment, attached from the highest address down
     * (the order in which Open MPI 4.1's table stays exact; it differs between ranks, so
     * every rank attaches all before any is used). */
    MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    for (int k = 0; k < NREG; k++) {
        region_alloc(&reg[k], lens[k], kinds[k]);
        order[k] = &reg[k];
    }
    qsort(order, NREG, sizeof(order[0]), by_address_desc);
    for (int k = 0; k < NREG; k++) {
        EXPECT(MPI_Win_attach(win, order[k]->mem, (MPI_Aint)order[k]->len) == MPI_SUCCESS,
               "attach %d", k);
    }
    for (int k = 0; k < NREG; k++) {
        addrs[k] = gather_addr(reg[k].mem);
    }
    for (int round = 0; round < 2; round++) {
        for (int j = 0; j < NREG; j++) {
            size_t len = reg[j].len < 200 ? reg[j].len - 3 : reg[j].len / 3;
            snprintf(what, sizeof(what), "region %d (round %d)", j, round);
            put_get(win, &reg[j], addrs[j], reg[j].len < 200 ? 3 : reg[j].len / 2, len,
                    (j + round) % 3, (unsigned)(round * 16 + j), what);
            put_get(win, &reg[j], addrs[j], 0, reg[j].len, (j + round + 1) % 3,
                    (unsigned)(round * 16 + j + 100), what);
        }
    }
    if (rank == 0) {
        printf("%d regions attached: put/get: ok\n", NREG);
    }
    for (int k = 0; k < NREG; k++) {
        if (reg[k].len >= 64) {
            snprintf(what, sizeof(what), "atomics on region %d", k);
            atomics(win, &reg[k], addrs[k], what);
        }
    }
    if (rank == 0) {
        printf("fetch_and_op, compare_and_swap, accumulate on attached memory: ok\n");
    }

    /* 3. Each rank detaches its lowest region and attaches it again, three times. */
    for (int round = 0; round < 3; round++) {
        struct region *low = order[NREG - 1];
        MPI_Barrier(MPI_COMM_WORLD);
        EXPECT(MPI_Win_detach(win, low->mem) == MPI_SUCCESS, "detach");
        MPI_Barrier(MPI_COMM_WORLD);
        EXPECT(MPI_Win_attach(win, low->mem, (MPI_Aint)low->len) == MPI_SUCCESS, "re-attach");
        MPI_Barrier(MPI_COMM_WORLD);
        for (int j = 0; j < NREG; j++) {
            snprintf(what, sizeof(what), "region %d after re-attach (round %d)", j, round);
            put_get(win, &reg[j], addrs[j], 1, reg[j].len - 1, (round + j) % 3,
                    900u + (unsigned)(round * 16 + j), what);
        }
    }
    if (rank == 0) {
        printf("detach and re-attach: ok\n");
    }

    MPI_Win_fence(0, win);
    for (int k = 0; k < NREG; k++) {
        MPI_Win_detach(win, reg[k].mem);
    }
    MPI_Win_free(&win);
    for (int k = 0; k < NREG; k++) {
        region_free(&reg[k]);
        free(addrs[k]);
    }
    MPI_Finalize();
    if (rank == 0) {
        printf("mpi_rma_dynamic: all passed on %d ranks\n", size);
    }
    return 0;
}
