/*
 * rucx — C headers of the UCX 1.13 API, written for rucx.
 * Thread modes of contexts and workers.
 */
#ifndef UCS_TYPE_THREAD_MODE_H
#define UCS_TYPE_THREAD_MODE_H

typedef enum {
    UCS_THREAD_MODE_SINGLE,     /* one thread only */
    UCS_THREAD_MODE_SERIALIZED, /* several threads, one at a time */
    UCS_THREAD_MODE_MULTI,      /* several threads at once (rucx: one lock per worker) */
    UCS_THREAD_MODE_LAST
} ucs_thread_mode_t;

/* "single", "serialized", "multi". */
extern const char *ucs_thread_mode_names[];

#endif
