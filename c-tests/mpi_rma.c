/* MPI one-sided communication over osc ucx: Put, Get, Accumulate, Fetch_and_op and
 * Compare_and_swap, synchronised with fences and with lock/unlock, on windows made by
 * MPI_Win_allocate, MPI_Win_create and MPI_Win_create_dynamic (attached memory).
 * Runs on any number of ranks >= 2. */
#include "mpi_common.h"
#include <stdint.h>
#include <mpi.h>

static int rank, size;

enum { N = 4096 };

static void fence_test(MPI_Win win, int64_t *base, const char *what)
{
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int64_t src[N], got[N];
    for (int i = 0; i < N; i++) {
        base[i] = -1;
        src[i] = rank * 100000 + i;
    }
    MPI_Win_fence(0, win);
    MPI_Put(src, N, MPI_INT64_T, next, 0, N, MPI_INT64_T, win);
    MPI_Win_fence(0, win);
    for (int i = 0; i < N; i++) {
        EXPECT(base[i] == prev * 100000 + i, "%s: put element %d = %lld", what, i,
               (long long)base[i]);
    }
    MPI_Get(got, N, MPI_INT64_T, next, 0, N, MPI_INT64_T, win);
    MPI_Win_fence(0, win);
    for (int i = 0; i < N; i++) {
        EXPECT(got[i] == rank * 100000 + i, "%s: get element %d", what, i);
    }
    /* everyone adds into rank 0's first 16 elements */
    for (int i = 0; i < 16; i++) {
        src[i] = rank + 1;
    }
    if (rank == 0) {
        for (int i = 0; i < 16; i++) {
            base[i] = 0;
        }
    }
    MPI_Win_fence(0, win);
    MPI_Accumulate(src, 16, MPI_INT64_T, 0, 0, 16, MPI_INT64_T, MPI_SUM, win);
    MPI_Win_fence(0, win);
    if (rank == 0) {
        for (int i = 0; i < 16; i++) {
            EXPECT(base[i] == (int64_t)size * (size + 1) / 2, "%s: accumulate %lld", what,
                   (long long)base[i]);
        }
    }
    MPI_Win_fence(0, win);
}

static void lock_test(MPI_Win win, int64_t *base, const char *what)
{
    int64_t one = 1, old = -1, cmp, newv;
    /* counter at element 100 of rank 0 */
    if (rank == 0) {
        base[100] = 0;
        base[101] = 0;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < 10; i++) {
        MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
        MPI_Fetch_and_op(&one, &old, MPI_INT64_T, 0, 100, MPI_SUM, win);
        MPI_Win_unlock(0, win);
        EXPECT(old >= 0 && old < 10 * size, "%s: fetch_and_op returned %lld", what,
               (long long)old);
    }
    /* a compare-and-swap race: exactly one rank wins slot 101 */
    cmp = 0;
    newv = rank + 1;
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
    MPI_Compare_and_swap(&newv, &cmp, &old, MPI_INT64_T, 0, 101, win);
    MPI_Win_unlock(0, win);
    {
        int won = old == 0, winners = 0;
        MPI_Allreduce(&won, &winners, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        EXPECT(winners == 1, "%s: %d ranks won the compare-and-swap", what, winners);
    }
    /* exclusive lock: put then get back */
    {
        int64_t v = 5000 + rank, back = 0;
        int target = (rank + 1) % size;
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, target, 0, win);
        MPI_Put(&v, 1, MPI_INT64_T, target, 200 + rank, 1, MPI_INT64_T, win);
        MPI_Win_flush(target, win);
        MPI_Get(&back, 1, MPI_INT64_T, target, 200 + rank, 1, MPI_INT64_T, win);
        MPI_Win_unlock(target, win);
        EXPECT(back == v, "%s: get after put under lock: %lld", what, (long long)back);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        EXPECT(base[100] == 10 * size, "%s: counter %lld", what, (long long)base[100]);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static void dynamic_test(void)
{
    MPI_Win win;
    int64_t *mem = malloc(N * sizeof(int64_t)), *addrs = malloc(size * sizeof(int64_t));
    MPI_Aint a;
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int64_t v[64], got[64];
    MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    for (int i = 0; i < N; i++) {
        mem[i] = -1;
    }
    MPI_Win_attach(win, mem, N * sizeof(int64_t));
    MPI_Get_address(mem, &a);
    MPI_Allgather(&a, 1, MPI_AINT, addrs, 1, MPI_AINT, MPI_COMM_WORLD);
    for (int i = 0; i < 64; i++) {
        v[i] = rank * 1000 + i;
    }
    MPI_Win_fence(0, win);
    MPI_Put(v, 64, MPI_INT64_T, next, (MPI_Aint)addrs[next] + 64 * 8, 64, MPI_INT64_T, win);
    MPI_Win_fence(0, win);
    for (int i = 0; i < 64; i++) {
        EXPECT(mem[64 + i] == prev * 1000 + i, "dynamic: put element %d = %lld", i,
               (long long)mem[64 + i]);
    }
    MPI_Win_lock(MPI_LOCK_SHARED, next, 0, win);
    MPI_Get(got, 64, MPI_INT64_T, next, (MPI_Aint)addrs[next] + 64 * 8, 64, MPI_INT64_T, win);
    MPI_Win_unlock(next, win);
    for (int i = 0; i < 64; i++) {
        EXPECT(got[i] == rank * 1000 + i, "dynamic: get element %d", i);
    }
    MPI_Win_fence(0, win);
    MPI_Win_detach(win, mem);
    MPI_Win_free(&win);
    free(mem);
    free(addrs);
}

int main(int argc, char **argv)
{
    MPI_Win win;
    int64_t *base, *mem;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    EXPECT(size >= 2, "needs at least 2 ranks");
    check_rucx_loaded(rank == 0);

    MPI_Win_allocate(N * sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, MPI_COMM_WORLD,
                     &base, &win);
    fence_test(win, base, "allocate");
    lock_test(win, base, "allocate");
    MPI_Win_free(&win);
    if (rank == 0) {
        printf("MPI_Win_allocate: put/get/accumulate with fence, fetch_and_op/cswap/put/get with lock: ok\n");
    }

    mem = malloc(N * sizeof(int64_t));
    MPI_Win_create(mem, N * sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, MPI_COMM_WORLD,
                   &win);
    fence_test(win, mem, "create");
    lock_test(win, mem, "create");
    MPI_Win_free(&win);
    free(mem);
    if (rank == 0) {
        printf("MPI_Win_create: ok\n");
    }

    dynamic_test();
    if (rank == 0) {
        printf("MPI_Win_create_dynamic: ok\n");
    }
    MPI_Finalize();
    if (rank == 0) {
        printf("mpi_rma: all passed on %d ranks\n", size);
    }
    return 0;
}
