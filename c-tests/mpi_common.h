/* Helpers of rucx's MPI and OpenSHMEM tests. */
#ifndef RUCX_MPI_COMMON_H
#define RUCX_MPI_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <dlfcn.h>

#define FAIL(...)                                                              \
    do {                                                                       \
        fprintf(stderr, "[pid %d] FAIL %s:%d: ", (int)getpid(), __FILE__, __LINE__); \
        fprintf(stderr, __VA_ARGS__);                                          \
        fprintf(stderr, "\n");                                                 \
        fflush(stderr);                                                        \
        abort();                                                               \
    } while (0)

#define EXPECT(cond, ...) do { if (!(cond)) { FAIL(__VA_ARGS__); } } while (0)

static inline unsigned char pat(size_t i, unsigned seed)
{
    return (unsigned char)((i * 2654435761u + seed * 40503u) >> 9);
}

/* Checks that the libucp.so.0 this process loaded (through Open MPI's ucx components)
 * is rucx: its version string names rucx. Prints the string and the library's path once.
 * Set RUCX_EXPECT_UCX=1 to run the tests on UCX itself. */
static inline void check_rucx_loaded(int print)
{
    const char *(*version)(void);
    const char *v;
    Dl_info info;
    void *h = dlopen("libucp.so.0", RTLD_LAZY | RTLD_NOLOAD);
    EXPECT(h != NULL, "libucp.so.0 is not loaded (are the ucx components in use?)");
    *(void **)&version = dlsym(h, "ucp_get_version_string");
    EXPECT(version != NULL, "ucp_get_version_string not found");
    v = version();
    if (dladdr((void *)version, &info) == 0) {
        info.dli_fname = "?";
    }
    if (print) {
        printf("libucp.so.0: %s, version %s\n", info.dli_fname, v);
    }
    if (getenv("RUCX_EXPECT_UCX") == NULL) {
        EXPECT(strstr(v, "rucx") != NULL, "the loaded libucp is not rucx: %s (%s)", v,
               info.dli_fname);
    }
}

#endif
