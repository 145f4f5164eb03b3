/* OpenSHMEM over spml ucx: put/get, atomics (add, fetch-add, swap on long and int;
 * compare-and-swap on long), barrier, shmem_ptr, and a clean shmem_finalize.
 * Runs on any number of PEs >= 2. (An int compare-and-swap is not tested: Debian's
 * Open MPI 4.1.4 atomic ucx component writes 8 bytes for it.) */
#include "mpi_common.h"
#include <shmem.h>

enum { N = 8192 };

static long src[N], dst[N];
static long counter_l;
static int counter_i;
static long swap_l;
static int swap_i;
static long cas_l;

int main(void)
{
    int me, npes, next, prev;
    shmem_init();
    me   = shmem_my_pe();
    npes = shmem_n_pes();
    EXPECT(npes >= 2, "needs at least 2 PEs");
    check_rucx_loaded(me == 0);
    next = (me + 1) % npes;
    prev = (me + npes - 1) % npes;

    /* put / get */
    for (int i = 0; i < N; i++) {
        src[i] = (long)me * 1000000 + i;
        dst[i] = -1;
    }
    shmem_barrier_all();
    shmem_long_put(dst, src, N, next);
    shmem_barrier_all();
    for (int i = 0; i < N; i++) {
        EXPECT(dst[i] == (long)prev * 1000000 + i, "put element %d = %ld", i, dst[i]);
    }
    {
        long *got = malloc(N * sizeof(long));
        shmem_long_get(got, src, N, next);
        for (int i = 0; i < N; i++) {
            EXPECT(got[i] == (long)next * 1000000 + i, "get element %d", i);
        }
        free(got);
        long one;
        shmem_putmem(&dst[5], &src[5], sizeof(long), next);
        shmem_quiet();
        one = shmem_long_g(&src[7], prev);
        EXPECT(one == (long)prev * 1000000 + 7, "g %ld", one);
    }
    shmem_barrier_all();
    /* the symmetric heap */
    {
        long *h = shmem_malloc(N * sizeof(long));
        int *hi = shmem_malloc(64 * sizeof(int));
        EXPECT(h != NULL && hi != NULL, "shmem_malloc");
        for (int i = 0; i < N; i++) {
            h[i] = -1;
        }
        hi[0] = 0;
        shmem_barrier_all();
        shmem_long_put(h, src, N, next);
        shmem_int_atomic_add(&hi[0], me + 1, 0);
        shmem_barrier_all();
        for (int i = 0; i < N; i++) {
            EXPECT(h[i] == (long)prev * 1000000 + i, "heap put element %d = %ld", i, h[i]);
        }
        if (me == 0) {
            EXPECT(hi[0] == npes * (npes + 1) / 2, "heap int add %d", hi[0]);
        }
        long *p = shmem_ptr(h, next);
        if (me == 0) {
            printf("heap shmem_ptr: %s\n", p != NULL ? "mapped" : "not mapped");
        }
        shmem_barrier_all();
        shmem_free(hi);
        shmem_free(h);
    }
    if (me == 0) {
        printf("put/get (data segment and heap): ok\n");
    }

    /* atomics on PE 0 */
    if (me == 0) {
        counter_l = 0;
        counter_i = 0;
        swap_l    = -1;
        swap_i    = -1;
        cas_l     = 0;
    }
    shmem_barrier_all();
    for (int i = 0; i < 10; i++) {
        shmem_long_atomic_add(&counter_l, 1, 0);
        shmem_int_atomic_add(&counter_i, 2, 0);
    }
    {
        long old_l = shmem_long_atomic_fetch_add(&counter_l, 100, 0);
        int old_i  = shmem_int_atomic_fetch_add(&counter_i, 100, 0);
        EXPECT(old_l >= 10 && old_l < 110L * npes, "fetch_add long %ld", old_l);
        EXPECT(old_i >= 20 && old_i < 120 * npes, "fetch_add int %d", old_i);
        long sw_l = shmem_long_atomic_swap(&swap_l, me, 0);
        int sw_i  = shmem_int_atomic_swap(&swap_i, me, 0);
        EXPECT(sw_l >= -1 && sw_l < npes, "swap long %ld", sw_l);
        EXPECT(sw_i >= -1 && sw_i < npes, "swap int %d", sw_i);
        long c = shmem_long_atomic_compare_swap(&cas_l, 0, me + 1, 0);
        int won = c == 0, winners = 0;
        static int wins[1];
        static long psync[SHMEM_REDUCE_SYNC_SIZE];
        static int pwrk[SHMEM_REDUCE_MIN_WRKDATA_SIZE];
        for (int i = 0; i < SHMEM_REDUCE_SYNC_SIZE; i++) {
            psync[i] = SHMEM_SYNC_VALUE;
        }
        wins[0] = won;
        shmem_barrier_all();
        shmem_int_sum_to_all(wins, wins, 1, 0, 0, npes, pwrk, psync);
        winners = wins[0];
        EXPECT(winners == 1, "%d PEs won the compare-and-swap", winners);
    }
    shmem_barrier_all();
    if (me == 0) {
        EXPECT(counter_l == 110L * npes, "long counter %ld", counter_l);
        EXPECT(counter_i == 120 * npes, "int counter %d", counter_i);
        EXPECT(swap_l >= 0 && swap_l < npes && swap_i >= 0 && swap_i < npes, "swaps");
        EXPECT(cas_l >= 1 && cas_l <= npes, "cswap value %ld", cas_l);
        printf("atomics (add, fetch-add, swap: long and int; cswap long): ok\n");
    }
    shmem_barrier_all();

    /* shmem_ptr: a peer's symmetric variable, when it is directly addressable */
    {
        long *p = shmem_ptr(&src[0], next);
        long *self = shmem_ptr(&src[0], me);
        EXPECT(self == &src[0] || self == NULL, "shmem_ptr to self");
        if (p != NULL) {
            EXPECT(p[3] == (long)next * 1000000 + 3, "shmem_ptr read %ld", p[3]);
        }
        if (me == 0) {
            printf("shmem_ptr: ok (peer %s)\n", p != NULL ? "mapped" : "not mapped");
        }
    }
    shmem_barrier_all();
    if (me == 0) {
        printf("shmem_test: all passed on %d PEs\n", npes);
        fflush(stdout);
    }
    shmem_finalize();
    return 0;
}
