/* Passive-target MPI one-sided communication while the target sleeps outside MPI.
 *
 * Rank 1 owns a window and, right after a barrier, sleeps SLEEP_S seconds in plain
 * sleep() (no MPI call). Rank 0 locks rank 1's window and does MPI_Get, MPI_Fetch_and_op
 * and MPI_Accumulate, then MPI_Win_unlock, timing lock to unlock from the barrier. Over
 * TCP osc ucx's lock and atomics are executed by the target's CPU, so without a progress
 * thread the unlock waits for the sleep to end; with UCX_RUCX_PROGRESS_THREAD=y the
 * target's progress thread serves them during the sleep.
 *
 * Argument: "during" (unlock must complete before DURING_S), "after" (it must not
 * complete before AFTER_S), or "print" (only report the time). Every value read or
 * written is checked. Runs on 2 ranks. */
#include "mpi_common.h"
#include <stdint.h>
#include <mpi.h>

enum { N = 8192, ACC = 64 };

#define SLEEP_S 2.0
#define DURING_S 1.5
/* The ranks leave the barrier at slightly different times: leave room for that. */
#define AFTER_S 1.8

int main(int argc, char **argv)
{
    int rank, size;
    const char *expect = argc > 1 ? argv[1] : "print";
    int64_t *base;
    MPI_Win win;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    EXPECT(size == 2, "runs on 2 ranks, not %d", size);
    check_rucx_loaded(rank == 0);
    MPI_Win_allocate(N * sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, MPI_COMM_WORLD,
                     &base, &win);
    for (int i = 0; i < N; i++) {
        base[i] = (int64_t)rank * 1000000 + i;
    }
    MPI_Barrier(MPI_COMM_WORLD);

    if (rank == 1) {
        MPI_Barrier(MPI_COMM_WORLD);
        sleep((unsigned)SLEEP_S);
    } else {
        static int64_t got[N], add[ACC];
        int64_t one = 5, old = -1;
        double t0, dt;
        for (int i = 0; i < ACC; i++) {
            add[i] = 3 * i + 1;
        }
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win);
        MPI_Get(got, N, MPI_INT64_T, 1, 0, N, MPI_INT64_T, win);
        MPI_Fetch_and_op(&one, &old, MPI_INT64_T, 1, N - 1, MPI_SUM, win);
        MPI_Accumulate(add, ACC, MPI_INT64_T, 1, 0, ACC, MPI_INT64_T, MPI_SUM, win);
        MPI_Win_unlock(1, win);
        dt = MPI_Wtime() - t0;
        printf("unlock completed %.3f s after the target fell asleep for %.1f s\n", dt,
               SLEEP_S);
        for (int i = 0; i < N; i++) {
            EXPECT(got[i] == 1000000 + i, "get element %d = %lld", i, (long long)got[i]);
        }
        EXPECT(old == 1000000 + N - 1, "fetch_and_op returned %lld", (long long)old);
        if (strcmp(expect, "during") == 0) {
            EXPECT(dt < DURING_S, "unlock took %.3f s: not served during the sleep", dt);
        } else if (strcmp(expect, "after") == 0) {
            EXPECT(dt >= AFTER_S, "unlock took %.3f s: done before the target woke", dt);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
        for (int i = 0; i < N; i++) {
            int64_t want = 1000000 + i;
            if (i < ACC) {
                want += 3 * i + 1;
            }
            if (i == N - 1) {
                want += 5;
            }
            EXPECT(base[i] == want, "window element %d = %lld, want %lld", i,
                   (long long)base[i], (long long)want);
        }
    }
    MPI_Win_free(&win);
    if (rank == 0) {
        printf("passive target (%s): all passed on %d ranks\n", expect, size);
    }
    MPI_Finalize();
    return 0;
}
