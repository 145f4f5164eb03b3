/* MPI ping-pong between ranks 0 and 1: half round-trip latency of 8 B, 4 KiB and 1 MiB
 * messages and the bandwidth of a window of 1 MiB sends. Prints one line per result,
 * "name value unit", for scripts to compare runs (rucx against UCX). */
#include "mpi_common.h"
#include <mpi.h>

static double latency_us(char *buf, int n, int iters, int rank)
{
    double t0 = 0;
    for (int i = -iters / 10; i < iters; i++) {
        if (i == 0) {
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
        }
        if (rank == 0) {
            MPI_Send(buf, n, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(buf, n, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(buf, n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, n, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
    }
    return (MPI_Wtime() - t0) * 1e6 / iters / 2;
}

static double bandwidth_mbs(char *buf, int n, int iters, int rank)
{
    enum { WINDOW = 16 };
    MPI_Request reqs[WINDOW];
    double t0 = 0;
    char ack;
    for (int i = -2; i < iters; i++) {
        if (i == 0) {
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
        }
        for (int w = 0; w < WINDOW; w++) {
            if (rank == 0) {
                MPI_Isend(buf, n, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &reqs[w]);
            } else if (rank == 1) {
                MPI_Irecv(buf, n, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &reqs[w]);
            }
        }
        if (rank <= 1) {
            MPI_Waitall(WINDOW, reqs, MPI_STATUSES_IGNORE);
        }
        if (rank == 1) {
            MPI_Send(&ack, 1, MPI_BYTE, 0, 3, MPI_COMM_WORLD);
        } else if (rank == 0) {
            MPI_Recv(&ack, 1, MPI_BYTE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
    }
    return (double)n * WINDOW * iters / (MPI_Wtime() - t0) / 1e6;
}

int main(int argc, char **argv)
{
    int rank;
    char *buf;
    int scale = argc > 1 ? atoi(argv[1]) : 1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (getenv("RUCX_EXPECT_UCX") == NULL) {
        check_rucx_loaded(rank == 0);
    }
    buf = calloc(1, 1 << 20);
    double l8 = latency_us(buf, 8, 20000 * scale, rank);
    double l4k = latency_us(buf, 4096, 10000 * scale, rank);
    double l1m = latency_us(buf, 1 << 20, 300 * scale, rank);
    double bw = bandwidth_mbs(buf, 1 << 20, 30 * scale, rank);
    if (rank == 0) {
        printf("latency_8B %.3f us\n", l8);
        printf("latency_4KiB %.3f us\n", l4k);
        printf("latency_1MiB %.3f us\n", l1m);
        printf("bandwidth_1MiB %.1f MB/s\n", bw);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
