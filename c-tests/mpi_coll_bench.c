/* Open MPI's own collectives, timed the way rucx-perftest times rucx's (crates/perf,
 * collective module), for scripts/bench-coll:
 *
 *   mpi_coll_bench TEST SIZES      TEST: barrier bcast allreduce allgather alltoall
 *                                  reduce_scatter; SIZES: comma-separated bytes
 *
 * Size meaning as rucx-perftest's: the vector (bcast, allreduce), one rank's block
 * (allgather, reduce_scatter: MPI_Reduce_scatter_block's count), one block per peer
 * (alltoall). Reductions sum ints. Iterations: 5000 up to 4 KiB, 1000 up to 64 KiB, 100
 * above; a tenth of that as warm-up; a barrier before the timed loop. The result of the
 * first call is checked. Rank 0 prints "test ompi np bytes iters avg_us min_us max_us":
 * the mean, smallest and largest over ranks of each rank's mean time per call. */
#include "mpi_common.h"
#include <mpi.h>

enum coll { BARRIER, BCAST, ALLREDUCE, ALLGATHER, ALLTOALL, REDUCE_SCATTER };

static const char *names[] = {"barrier", "bcast", "allreduce", "allgather", "alltoall",
                              "reduce_scatter"};

static int ival(int r, size_t i) { return (int)(r * 7919u + i * 31u + 1u); }

static void call(enum coll c, char *src, char *dst, size_t size, MPI_Comm w)
{
    int n = (int)size;
    switch (c) {
    case BARRIER: MPI_Barrier(w); break;
    case BCAST: MPI_Bcast(dst, n, MPI_BYTE, 0, w); break;
    case ALLREDUCE: MPI_Allreduce(src, dst, n / 4, MPI_INT, MPI_SUM, w); break;
    case ALLGATHER: MPI_Allgather(src, n, MPI_BYTE, dst, n, MPI_BYTE, w); break;
    case ALLTOALL: MPI_Alltoall(src, n, MPI_BYTE, dst, n, MPI_BYTE, w); break;
    case REDUCE_SCATTER: MPI_Reduce_scatter_block(src, dst, n / 4, MPI_INT, MPI_SUM, w); break;
    }
}

/* Fills the buffers of rank `r` of `p`. */
static void fill(enum coll c, char *src, char *dst, size_t size, int r, int p)
{
    size_t total = size * (size_t)p;
    memset(dst, 0, total);
    if (c == ALLREDUCE || c == REDUCE_SCATTER) {
        size_t n = (c == ALLREDUCE ? size : total) / 4;
        for (size_t i = 0; i < n; i++)
            ((int *)src)[i] = ival(r, i);
    } else if (c == BCAST) {
        if (r == 0)
            for (size_t i = 0; i < size; i++)
                dst[i] = (char)pat(i, 0);
    } else {
        for (size_t i = 0; i < total; i++)
            src[i] = (char)pat(i, (unsigned)r);
    }
}

static void check(enum coll c, const char *dst, size_t size, int r, int p)
{
    if (c == ALLREDUCE || c == REDUCE_SCATTER) {
        size_t n = size / 4, base = c == REDUCE_SCATTER ? (size_t)r * n : 0;
        for (size_t i = 0; i < n; i++) {
            int want = 0;
            for (int q = 0; q < p; q++)
                want += ival(q, base + i);
            EXPECT(((const int *)dst)[i] == want, "%s: element %zu", names[c], i);
        }
    } else if (c == BCAST) {
        for (size_t i = 0; i < size; i++)
            EXPECT((unsigned char)dst[i] == pat(i, 0), "bcast: byte %zu", i);
    } else if (c == ALLGATHER || c == ALLTOALL) {
        for (int q = 0; q < p; q++)
            for (size_t i = 0; i < size; i++) {
                size_t at = c == ALLGATHER ? i : (size_t)r * size + i;
                EXPECT((unsigned char)dst[(size_t)q * size + i] == pat(at, (unsigned)q),
                       "%s: byte %zu from %d", names[c], i, q);
            }
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int r, p;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    EXPECT(argc == 3, "usage: mpi_coll_bench TEST SIZES");
    int c = -1;
    for (int i = 0; i < (int)(sizeof names / sizeof *names); i++)
        if (strcmp(argv[1], names[i]) == 0)
            c = i;
    EXPECT(c >= 0, "unknown test %s", argv[1]);
    char *list = strdup(argv[2]);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        size_t size = strtoul(tok, NULL, 10);
        if (c == BARRIER)
            size = 0;
        EXPECT((c != ALLREDUCE && c != REDUCE_SCATTER) || size % 4 == 0, "size %zu", size);
        size_t total = (size ? size : 1) * (size_t)p;
        char *src = malloc(total), *dst = malloc(total);
        EXPECT(src && dst, "out of memory");
        fill((enum coll)c, src, dst, size, r, p);
        call((enum coll)c, src, dst, size, MPI_COMM_WORLD);
        check((enum coll)c, dst, size, r, p);
        long iters = size <= 4096 ? 5000 : size <= 65536 ? 1000 : 100;
        for (long i = 0; i < iters / 10; i++)
            call((enum coll)c, src, dst, size, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (long i = 0; i < iters; i++)
            call((enum coll)c, src, dst, size, MPI_COMM_WORLD);
        double mean = (MPI_Wtime() - t0) * 1e6 / (double)iters, sum, lo, hi;
        MPI_Allreduce(&mean, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(&mean, &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(&mean, &hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (r == 0) {
            printf("%-15s %-22s %5d %10zu %8ld %11.3f %11.3f %11.3f\n", names[c], "ompi", p,
                   size, iters, sum / p, lo, hi);
            fflush(stdout);
        }
        free(src);
        free(dst);
    }
    free(list);
    MPI_Finalize();
    return 0;
}
