/* floor_util.h: what the floor programs (cma_floor.c, ring_floor.c) share: the clock,
 * pinning, their common options and the parent/child pair they run as. Header-only, so
 * that scripts/bench-coll builds each program from its one .c file. */
#ifndef RUCX_FLOOR_UTIL_H
#define RUCX_FLOOR_UTIL_H

#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* What every floor program takes: -s BYTES[,BYTES...] -n ITERS -c CPU_A,CPU_B. */
struct floor_opts {
    const char *sizes;
    long iters; /* 0: the program's default per size */
    int cpu[2];
};

static inline double floor_now_ns(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* Pins the calling process to `cpu`, or exits. */
static inline void floor_pin(const char *prog, int cpu)
{
    cpu_set_t s;

    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    if (sched_setaffinity(0, sizeof(s), &s) != 0) {
        fprintf(stderr, "%s: cannot pin to CPU %d\n", prog, cpu);
        exit(1);
    }
}

/* Parses the options into `o` (which holds the defaults); 0, or 2 after a usage line. */
static inline int floor_parse(int argc, char **argv, const char *prog, struct floor_opts *o)
{
    int c;

    while ((c = getopt(argc, argv, "s:n:c:")) != -1) {
        switch (c) {
        case 's': o->sizes = optarg; break;
        case 'n': o->iters = atol(optarg); break;
        case 'c':
            if (sscanf(optarg, "%d,%d", &o->cpu[0], &o->cpu[1]) != 2) {
                fprintf(stderr, "%s: -c CPU_A,CPU_B\n", prog);
                return 2;
            }
            break;
        default:
            fprintf(stderr, "usage: %s [-s BYTES,...] [-n ITERS] [-c CPU_A,CPU_B]\n", prog);
            return 2;
        }
    }
    if (o->iters < 0) {
        fprintf(stderr, "%s: -n must be positive\n", prog);
        return 2;
    }
    return 0;
}

/* Forks the second member; the child dies with its parent. Returns fork's value. */
static inline pid_t floor_fork(const char *prog)
{
    pid_t child = fork();

    if (child < 0) {
        fprintf(stderr, "%s: fork failed\n", prog);
    } else if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
    }
    return child;
}

/* The parent's exit status: `rc`, or 1 when the child did not exit with 0. */
static inline int floor_reap(pid_t child, int rc)
{
    int status;

    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        return 1;
    }
    return rc;
}

#endif
