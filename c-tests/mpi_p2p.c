/* MPI point-to-point and collectives over pml ucx: blocking and nonblocking sends and
 * receives from 0 bytes to 64 MiB with data checked, MPI_ANY_SOURCE / MPI_ANY_TAG,
 * MPI_Ssend, Probe / Iprobe / Mprobe, cancel of a posted receive, a non-contiguous
 * derived datatype (pml ucx packs it through a generic datatype), and collectives.
 * Runs on any number of ranks >= 2. */
#include "mpi_common.h"
#include <mpi.h>

static int rank, size;

static void fill(unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        b[i] = pat(i, seed);
    }
}

static void check(const unsigned char *b, size_t n, unsigned seed, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        EXPECT(b[i] == pat(i, seed), "%s: byte %zu of %zu differs", what, i, n);
    }
}

/* Ring exchange: every rank sends to rank+1 and receives from rank-1. */
static void sizes_test(unsigned char *sbuf, unsigned char *rbuf)
{
    static const size_t sizes[] = {0, 1, 7, 64, 1000, 4096, 8192, 16384, 65536,
                                   100000, 1 << 20, 4 << 20, 64 << 20};
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        MPI_Request reqs[2];
        MPI_Status st;
        int count;
        /* nonblocking */
        fill(sbuf, n, (unsigned)(rank * 100 + k));
        memset(rbuf, 0, n);
        MPI_Irecv(rbuf, (int)n, MPI_BYTE, prev, (int)k, MPI_COMM_WORLD, &reqs[0]);
        MPI_Isend(sbuf, (int)n, MPI_BYTE, next, (int)k, MPI_COMM_WORLD, &reqs[1]);
        MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE);
        check(rbuf, n, (unsigned)(prev * 100 + k), "isend/irecv");
        /* blocking, receiver posts late on odd ranks */
        fill(sbuf, n, (unsigned)(rank * 100 + k + 50));
        memset(rbuf, 0, n);
        if (rank % 2 == 0) {
            MPI_Send(sbuf, (int)n, MPI_BYTE, next, 1000 + (int)k, MPI_COMM_WORLD);
            MPI_Recv(rbuf, (int)n, MPI_BYTE, prev, 1000 + (int)k, MPI_COMM_WORLD, &st);
        } else {
            MPI_Recv(rbuf, (int)n, MPI_BYTE, prev, 1000 + (int)k, MPI_COMM_WORLD, &st);
            MPI_Send(sbuf, (int)n, MPI_BYTE, next, 1000 + (int)k, MPI_COMM_WORLD);
        }
        MPI_Get_count(&st, MPI_BYTE, &count);
        EXPECT((size_t)count == n && st.MPI_SOURCE == prev, "recv status (count %d src %d)",
               count, st.MPI_SOURCE);
        check(rbuf, n, (unsigned)(prev * 100 + k + 50), "send/recv");
    }
    if (rank == 0) {
        printf("sizes 0 B .. 64 MiB: ok\n");
    }
}

static void wildcard_test(void)
{
    MPI_Status st;
    int v, seen = 0;
    if (rank != 0) {
        v = rank * 7;
        MPI_Send(&v, 1, MPI_INT, 0, 300 + rank, MPI_COMM_WORLD);
    } else {
        for (int i = 1; i < size; i++) {
            MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            EXPECT(v == st.MPI_SOURCE * 7 && st.MPI_TAG == 300 + st.MPI_SOURCE,
                   "wildcard receive got %d from %d tag %d", v, st.MPI_SOURCE, st.MPI_TAG);
            seen |= 1 << st.MPI_SOURCE;
        }
        EXPECT(seen == ((1 << size) - 2), "not every sender was seen (%x)", seen);
        printf("ANY_SOURCE/ANY_TAG: ok\n");
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static void ssend_test(unsigned char *sbuf, unsigned char *rbuf)
{
    static const size_t sizes[] = {0, 8, 5000, 300000};
    for (size_t k = 0; k < 4; k++) {
        size_t n = sizes[k];
        if (rank == 0) {
            fill(sbuf, n, 900 + (unsigned)k);
            MPI_Ssend(sbuf, (int)n, MPI_BYTE, 1, 400, MPI_COMM_WORLD);
        } else if (rank == 1) {
            usleep(20000);
            MPI_Recv(rbuf, (int)n, MPI_BYTE, 0, 400, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            check(rbuf, n, 900 + (unsigned)k, "ssend");
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("Ssend: ok\n");
    }
}

static void probe_test(unsigned char *sbuf, unsigned char *rbuf)
{
    MPI_Status st;
    MPI_Message msg;
    int flag = 0, count;
    if (rank == 0) {
        fill(sbuf, 70000, 11);
        MPI_Send(sbuf, 70000, MPI_BYTE, 1, 500, MPI_COMM_WORLD);
        fill(sbuf, 123, 12);
        MPI_Send(sbuf, 123, MPI_BYTE, 1, 501, MPI_COMM_WORLD);
        fill(sbuf, 2 << 20, 13);
        MPI_Send(sbuf, 2 << 20, MPI_BYTE, 1, 502, MPI_COMM_WORLD);
    } else if (rank == 1) {
        MPI_Probe(0, 500, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_BYTE, &count);
        EXPECT(count == 70000 && st.MPI_TAG == 500, "probe count %d", count);
        MPI_Recv(rbuf, count, MPI_BYTE, 0, 500, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        check(rbuf, 70000, 11, "probe");
        while (!flag) {
            MPI_Iprobe(MPI_ANY_SOURCE, 501, MPI_COMM_WORLD, &flag, &st);
        }
        MPI_Get_count(&st, MPI_BYTE, &count);
        EXPECT(count == 123 && st.MPI_SOURCE == 0, "iprobe count %d", count);
        MPI_Recv(rbuf, count, MPI_BYTE, 0, 501, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        check(rbuf, 123, 12, "iprobe");
        MPI_Mprobe(0, MPI_ANY_TAG, MPI_COMM_WORLD, &msg, &st);
        MPI_Get_count(&st, MPI_BYTE, &count);
        EXPECT(count == (2 << 20) && st.MPI_TAG == 502, "mprobe count %d", count);
        MPI_Mrecv(rbuf, count, MPI_BYTE, &msg, &st);
        check(rbuf, 2 << 20, 13, "mprobe/mrecv");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("Probe/Iprobe/Mprobe: ok\n");
    }
}

static void cancel_test(void)
{
    MPI_Request req;
    MPI_Status st;
    int v, cancelled = 0;
    MPI_Irecv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 777, MPI_COMM_WORLD, &req);
    MPI_Cancel(&req);
    MPI_Wait(&req, &st);
    MPI_Test_cancelled(&st, &cancelled);
    EXPECT(cancelled, "posted receive was not cancelled");
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("cancel: ok\n");
    }
}

static void datatype_test(void)
{
    /* every other double of a 2 x N matrix column, and a struct type */
    enum { N = 20000 };
    double *a = malloc(2 * N * sizeof(double)), *b = malloc(2 * N * sizeof(double));
    MPI_Datatype vec;
    MPI_Type_vector(N, 1, 2, MPI_DOUBLE, &vec);
    MPI_Type_commit(&vec);
    for (int i = 0; i < 2 * N; i++) {
        a[i] = rank * 1e6 + i;
        b[i] = -1;
    }
    if (rank == 0) {
        MPI_Send(a, 1, vec, 1, 600, MPI_COMM_WORLD);
        MPI_Send(a + 1, 1, vec, 1, 601, MPI_COMM_WORLD);
    } else if (rank == 1) {
        MPI_Recv(b, 1, vec, 0, 600, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Recv(b + 1, 1, vec, 0, 601, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (int i = 0; i < 2 * N; i++) {
            EXPECT(b[i] == i, "vector element %d is %g", i, b[i]);
        }
        /* strided receive of a contiguous send */
    }
    if (rank == 1) {
        MPI_Send(a, N, MPI_DOUBLE, 0, 602, MPI_COMM_WORLD);
    } else if (rank == 0) {
        MPI_Recv(b, 1, vec, 1, 602, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (int i = 0; i < N; i++) {
            EXPECT(b[2 * i] == 1e6 + i, "strided element %d", i);
        }
    }
    MPI_Type_free(&vec);
    free(a);
    free(b);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("derived datatype: ok\n");
    }
}

static void collective_test(void)
{
    int *all = malloc(size * sizeof(int)), *out = malloc(size * sizeof(int));
    long sum = 0, total = 0;
    int root_val = rank == 0 ? 4242 : 0;
    double big[4096], red[4096];
    MPI_Bcast(&root_val, 1, MPI_INT, 0, MPI_COMM_WORLD);
    EXPECT(root_val == 4242, "bcast");
    sum = rank + 1;
    MPI_Allreduce(&sum, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    EXPECT(total == (long)size * (size + 1) / 2, "allreduce %ld", total);
    for (int i = 0; i < size; i++) {
        all[i] = rank * 1000 + i;
    }
    MPI_Alltoall(all, 1, MPI_INT, out, 1, MPI_INT, MPI_COMM_WORLD);
    for (int i = 0; i < size; i++) {
        EXPECT(out[i] == i * 1000 + rank, "alltoall");
    }
    MPI_Allgather(&rank, 1, MPI_INT, out, 1, MPI_INT, MPI_COMM_WORLD);
    for (int i = 0; i < size; i++) {
        EXPECT(out[i] == i, "allgather");
    }
    for (int i = 0; i < 4096; i++) {
        big[i] = rank + i;
    }
    MPI_Reduce(big, red, 4096, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        for (int i = 0; i < 4096; i++) {
            EXPECT(red[i] == size - 1 + i, "reduce");
        }
    }
    free(all);
    free(out);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("collectives: ok\n");
    }
}

int main(int argc, char **argv)
{
    unsigned char *sbuf, *rbuf;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    EXPECT(size >= 2, "needs at least 2 ranks");
    check_rucx_loaded(rank == 0);
    sbuf = malloc(64 << 20);
    rbuf = malloc(64 << 20);
    sizes_test(sbuf, rbuf);
    wildcard_test();
    ssend_test(sbuf, rbuf);
    probe_test(sbuf, rbuf);
    cancel_test();
    datatype_test();
    collective_test();
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    if (rank == 0) {
        printf("mpi_p2p: all passed on %d ranks\n", size);
    }
    return 0;
}
