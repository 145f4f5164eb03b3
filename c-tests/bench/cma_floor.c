/* cma_floor: the least time a 2-member allgather or alltoall (not in place) of N bytes
 * per block can take on this host without a mapping of the other process's memory
 * (no XPMEM or KNEM here). Each member must end with its own block copied into its
 * destination and the other member's block copied across processes. The cheapest way
 * across is one process_vm_readv (a shared segment costs two copies, measured slower),
 * and the two members share the work evenly, so each does one local copy and one pull.
 * Around them, the two flag exchanges any such collective needs: "my address is
 * published" before the pulls, "I am done reading yours" after them.
 *
 * Two processes pinned to two CPUs repeat exactly that over the same buffers that a
 * benchmark would reuse, as many times as the collective benchmarks do (a tenth of that
 * first, as warm-up), and print the mean time per iteration. Nothing else runs: no
 * library, no matching, no request. scripts/bench-coll runs it beside rucx and Open MPI;
 * not a CI test.
 *
 *   cma_floor [-s BYTES[,BYTES...]] [-n ITERS] [-c CPU_A,CPU_B]
 *
 * Prints, per size, "floor BYTES ITERS MEAN_US". */
#include "floor_util.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>

struct shared {
    _Alignas(64) volatile uint64_t flag[2][8]; /* one line per member */
    volatile uint64_t pid[2];
    volatile uint64_t src[2];
    volatile int failed;
};

/* Stores this member's flag and waits for the other's to reach the same value. */
static int exchange(struct shared *sh, int me, uint64_t k)
{
    __atomic_store_n(&sh->flag[me][0], k, __ATOMIC_RELEASE);
    while (__atomic_load_n(&sh->flag[1 - me][0], __ATOMIC_ACQUIRE) < k) {
        if (sh->failed) {
            return -1;
        }
    }
    return 0;
}

/* One member's side for blocks of n bytes; the initiator (member 0) returns the mean
 * µs per iteration, the other 0; -1 on failure. */
static double side(struct shared *sh, int me, size_t n, long iters, uint64_t *k)
{
    char *src = malloc(n), *dst = malloc(2 * n);
    double t0 = 0;
    long warm = iters / 10;

    if (src == NULL || dst == NULL) {
        sh->failed = 1;
        return -1;
    }
    memset(src, 'a' + me, n);
    memset(dst, 0, 2 * n);
    sh->src[me] = (uint64_t)(uintptr_t)src;
    for (long i = 0; i < warm + iters; i++) {
        struct iovec local = {dst + (size_t)(1 - me) * n, n}, remote;

        if (i == warm) {
            t0 = floor_now_ns();
        }
        if (exchange(sh, me, ++*k) != 0) {
            return -1;
        }
        /* published before the exchange */
        remote.iov_base = (void *)(uintptr_t)sh->src[1 - me];
        remote.iov_len = n;
        memcpy(dst + (size_t)me * n, src, n);
        if (process_vm_readv((pid_t)sh->pid[1 - me], &local, 1, &remote, 1, 0) != (ssize_t)n) {
            fprintf(stderr, "cma_floor: process_vm_readv: %s\n", strerror(errno));
            sh->failed = 1;
            return -1;
        }
        if (exchange(sh, me, ++*k) != 0) {
            return -1;
        }
    }
    {
        double mean = (floor_now_ns() - t0) / (double)iters / 1e3;

        /* the blocks must be what the members wrote */
        for (size_t b = 0; b < 2 * n; b++) {
            if (dst[b] != (char)('a' + (int)(b / n))) {
                fprintf(stderr, "cma_floor: wrong byte at %zu\n", b);
                sh->failed = 1;
                return -1;
            }
        }
        free(src);
        free(dst);
        return me == 0 ? mean : 0;
    }
}

int main(int argc, char **argv)
{
    struct floor_opts o = {"65536,1048576", 0, {0, 1}};
    int rc = 0;
    struct shared *sh;
    pid_t child;

    if (floor_parse(argc, argv, "cma_floor", &o) != 0) {
        return 2;
    }
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("cma_floor: mmap");
        return 1;
    }
    memset((void *)sh, 0, sizeof(*sh));
    sh->pid[0] = (uint64_t)getpid();
    /* the child pulls from its parent too (Yama's ptrace scope 1 allows only ancestors) */
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY);
    child = floor_fork("cma_floor");
    if (child < 0) {
        return 1;
    }
    if (child > 0) {
        sh->pid[1] = (uint64_t)child;
    }
    {
        int me = child == 0 ? 1 : 0;
        uint64_t k = 0;
        char *list = strdup(o.sizes), *save = NULL;

        while (me == 1 && __atomic_load_n(&sh->pid[1], __ATOMIC_ACQUIRE) == 0) {
        }
        floor_pin("cma_floor", o.cpu[me]);
        for (char *t = strtok_r(list, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
            size_t n = (size_t)atol(t);
            /* by default the counts of rucx-perftest's and mpi_coll_bench's collectives */
            long it = o.iters > 0 ? o.iters : (n <= 4096 ? 5000 : n <= 65536 ? 1000 : 100);
            double us;

            if (n == 0) {
                continue;
            }
            us = side(sh, me, n, it, &k);
            if (us < 0) {
                rc = 1;
                break;
            }
            if (me == 0) {
                printf("floor %zu %ld %.3f\n", n, it, us);
                fflush(stdout);
            }
        }
        free(list);
        if (me == 1) {
            _exit(rc);
        }
    }
    return floor_reap(child, rc);
}
