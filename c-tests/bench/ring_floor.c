/* ring_floor: the least time per 2-member bcast of N bytes (up to 8 KiB) on this host
 * when the root's data reaches the other member through shared memory: the root copies
 * it into the next cell of a ring of 64 cells and publishes the cell's sequence number,
 * the other member waits for that number, copies the data out and says how far it got,
 * so that the root may run up to 63 bcasts ahead (Open MPI's eager fragments and rucx's
 * mid cells both work this way). Nothing else runs: no library, no matching, no
 * request. Tried and slower here: the root's stores non-temporal (0.64–0.70 against
 * 0.43–0.44 µs at 4 KiB) or demoted to the shared cache after the copy (1.2 µs).
 * scripts/bench-coll runs it beside rucx and Open MPI; not a CI test.
 *
 *   ring_floor [-s BYTES[,BYTES...]] [-n ITERS] [-c CPU_A,CPU_B]
 *
 * Prints, per size, "floor BYTES ITERS MEAN_US". */
#include "floor_util.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#define CELLS 64
#define MAX_BYTES 8192

struct cell {
    _Alignas(64) volatile uint64_t seq;
    char data[MAX_BYTES];
};

struct shared {
    struct cell ring[CELLS];
    _Alignas(64) volatile uint64_t got; /* the reader's last bcast */
};

/* `iters` bcasts of `n` bytes numbered from *k + 1; the root returns the mean µs per
 * bcast, the reader 0, or -1 when the reader got a wrong byte. */
static double run(struct shared *sh, int root, size_t n, long iters, uint64_t *k)
{
    char *buf = malloc(n);
    uint64_t first = *k + 1, last = *k + (uint64_t)iters;
    double t0 = floor_now_ns(), mean = 0;
    int bad = 0;

    if (buf == NULL) {
        return -1;
    }
    for (uint64_t i = first; i <= last; i++) {
        struct cell *c = &sh->ring[i % CELLS];

        if (root) {
            memset(buf, (int)(i & 0xff), 1); /* each bcast its own first byte */
            while (__atomic_load_n(&sh->got, __ATOMIC_ACQUIRE) + CELLS - 1 < i) {
            }
            memcpy(c->data, buf, n);
            __atomic_store_n(&c->seq, i, __ATOMIC_RELEASE);
        } else {
            while (__atomic_load_n(&c->seq, __ATOMIC_ACQUIRE) != i) {
            }
            memcpy(buf, c->data, n);
            bad |= (unsigned char)buf[0] != (unsigned char)(i & 0xff);
            __atomic_store_n(&sh->got, i, __ATOMIC_RELEASE);
        }
    }
    if (root) {
        while (__atomic_load_n(&sh->got, __ATOMIC_ACQUIRE) < last) {
        }
        mean = (floor_now_ns() - t0) / (double)iters / 1e3;
    }
    *k = last;
    free(buf);
    return bad ? -1 : mean;
}

int main(int argc, char **argv)
{
    /* by default the benchmarks' counts: 5000 up to 4 KiB, then 1000 */
    struct floor_opts o = {"4096", 0, {0, 1}};
    int rc = 0;
    struct shared *sh;
    pid_t child;

    if (floor_parse(argc, argv, "ring_floor", &o) != 0) {
        return 2;
    }
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("ring_floor: mmap");
        return 1;
    }
    child = floor_fork("ring_floor");
    if (child < 0) {
        return 1;
    }
    {
        int root = child != 0;
        uint64_t k = 0;
        char *list = strdup(o.sizes), *save = NULL;

        floor_pin("ring_floor", o.cpu[root ? 0 : 1]);
        for (char *t = strtok_r(list, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
            size_t n = (size_t)atol(t);
            long it = o.iters > 0 ? o.iters : (n <= 4096 ? 5000 : 1000);
            double us;

            if (n == 0 || n > MAX_BYTES) {
                continue;
            }

            /* a tenth as warm-up, as the benchmarks do */
            if (run(sh, root, n, it / 10 + 1, &k) < 0) {
                us = -1;
            } else {
                us = run(sh, root, n, it, &k);
            }
            if (us < 0) {
                fprintf(stderr, "ring_floor: %s\n", root ? "out of memory" : "wrong data");
                rc = 1;
                if (root) {
                    kill(child, SIGKILL); /* it would wait for the next size forever */
                    break;
                }
                continue; /* the root still counts on this member's progress */
            }
            if (root) {
                printf("floor %zu %ld %.3f\n", n, it, us);
                fflush(stdout);
            }
        }
        free(list);
        if (!root) {
            _exit(rc);
        }
    }
    return floor_reap(child, rc);
}
