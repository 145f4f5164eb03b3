/* line_pingpong: the hardware's floor for a signalled write between two CPUs. Two
 * threads, pinned to the two CPUs, take turns: each adds 1 (a locked read-modify-write,
 * as a put with an "add" signal does) to a 64-bit word in a cache line that the other
 * one polls, then polls its own line for the answer. Nothing else is touched, so the
 * one-way time is what any put with remote signal between those CPUs costs at least:
 * the writer taking the line from the poller, and the poller taking it back.
 * Not a CI test; scripts/bench-put-signal runs it beside the libraries.
 *
 *   line_pingpong [-n ITERS] [-w WARMUP] [-c CPU_A,CPU_B]
 *
 * Prints "latency_us X": the median of the round trips, halved (as put_signal_lat). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct line {
    _Alignas(64) uint64_t word;
    char pad[64 - sizeof(uint64_t)];
};

static struct line to_b, to_a;
static long iters = 200000, warmup = 10000;
static int cpu_a = 0, cpu_b = 1;

static void pin(int cpu)
{
    cpu_set_t s;

    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    if (pthread_setaffinity_np(pthread_self(), sizeof(s), &s) != 0) {
        fprintf(stderr, "line_pingpong: cannot pin to CPU %d\n", cpu);
        exit(1);
    }
}

static void wait_for(const struct line *l, uint64_t n)
{
    while (__atomic_load_n(&l->word, __ATOMIC_ACQUIRE) < n) {
    }
}

static void *responder(void *arg)
{
    uint64_t i;

    (void)arg;
    pin(cpu_b);
    for (i = 1; i <= (uint64_t)(iters + warmup); i++) {
        wait_for(&to_b, i);
        __atomic_fetch_add(&to_a.word, 1, __ATOMIC_SEQ_CST);
    }
    return NULL;
}

static double now_ns(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    pthread_t t;
    double *rt;
    uint64_t i;
    int c;

    while ((c = getopt(argc, argv, "n:w:c:")) != -1) {
        switch (c) {
        case 'n': iters = atol(optarg); break;
        case 'w': warmup = atol(optarg); break;
        case 'c':
            if (sscanf(optarg, "%d,%d", &cpu_a, &cpu_b) != 2) {
                fprintf(stderr, "line_pingpong: -c CPU_A,CPU_B\n");
                return 2;
            }
            break;
        default:
            fprintf(stderr, "usage: line_pingpong [-n ITERS] [-w WARMUP] [-c CPU_A,CPU_B]\n");
            return 2;
        }
    }
    if (iters < 1 || warmup < 0) {
        fprintf(stderr, "line_pingpong: bad counts\n");
        return 2;
    }
    rt = malloc(sizeof(double) * (size_t)iters);
    if (rt == NULL || pthread_create(&t, NULL, responder, NULL) != 0) {
        fprintf(stderr, "line_pingpong: out of resources\n");
        return 1;
    }
    pin(cpu_a);
    for (i = 1; i <= (uint64_t)(iters + warmup); i++) {
        double t0 = now_ns();

        __atomic_fetch_add(&to_b.word, 1, __ATOMIC_SEQ_CST);
        wait_for(&to_a, i);
        if (i > (uint64_t)warmup) {
            rt[i - 1 - (uint64_t)warmup] = now_ns() - t0;
        }
    }
    pthread_join(t, NULL);
    qsort(rt, (size_t)iters, sizeof(double), cmp);
    printf("latency_us %.4f\n", rt[iters / 2] / 2 / 1e3);
    free(rt);
    return 0;
}
