/*
 * The libucs utilities UCX's tools import (docs/c-abi.md, "UCS utilities"), called the
 * way those tools call them: through UCX's installed headers and their macros. Built with
 * UCX's headers only (rucx ships no string-buffer or logging headers) and run on rucx by
 * crates/capi/tests/ucx_tools.rs. Prints "UCS UTIL OK" at the end.
 */
#define _GNU_SOURCE
#include <ucs/datastruct/string_buffer.h>
#include <ucs/debug/log_def.h>
#include <ucs/sys/sock.h>
#include <ucs/sys/string.h>
#include <ucs/type/status.h>

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Exported by libucs but declared in headers Debian does not install. */
double ucs_get_cpu_clocks_per_sec(void);
size_t ucs_get_page_size(void);
long ucs_sys_get_num_cpus(void);
int ucs_sys_getaffinity(cpu_set_t *cpuset);
int ucs_sys_setaffinity(cpu_set_t *cpuset);
void ucs_x86_init_tsc_freq(void);
extern int ucs_arch_x86_enable_rdtsc;
ucs_status_t ucs_async_context_init(void *async, ucs_async_mode_t mode);
void ucs_async_context_cleanup(void *async);
void ucs_empty_function(void);
void ucs_fatal_error_format(const char *file, unsigned line, const char *function,
                            const char *format, ...);
ucs_status_t ucs_empty_function_return_success(void);

#define CHECK(_cond) \
    do { \
        if (!(_cond)) { \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #_cond); \
            exit(1); \
        } \
    } while (0)

static void strings(void)
{
    char small[6];
    char zeroed[16];
    char fixed[32];

    memset(small, 'x', sizeof(small));
    ucs_snprintf_safe(small, sizeof(small), "%s-%d", "abcdef", 42);
    CHECK(strcmp(small, "abcde") == 0);

    memset(zeroed, 'x', sizeof(zeroed));
    ucs_snprintf_zero(zeroed, sizeof(zeroed), "%d", 7);
    CHECK(strcmp(zeroed, "7") == 0);
    CHECK(zeroed[sizeof(zeroed) - 1] == '\0');
    CHECK(zeroed[5] == '\0');

    memset(small, 'x', sizeof(small));
    ucs_strncpy_zero(small, "0123456789", sizeof(small));
    CHECK(strcmp(small, "01234") == 0);

    {
        /* Fixed storage: appends, truncates at the capacity, trims. */
        UCS_STRING_BUFFER_STATIC(strb, fixed);
        ucs_string_buffer_appendf(&strb, "%s=%d,", "a", 1);
        ucs_string_buffer_appendf(&strb, "%s=%d,", "b", 2);
        CHECK(strcmp(ucs_string_buffer_cstr(&strb), "a=1,b=2,") == 0);
        ucs_string_buffer_rtrim(&strb, ",");
        CHECK(strcmp(ucs_string_buffer_cstr(&strb), "a=1,b=2") == 0);
        ucs_string_buffer_appendf(&strb, "  \n");
        ucs_string_buffer_rtrim(&strb, NULL);
        CHECK(strcmp(ucs_string_buffer_cstr(&strb), "a=1,b=2") == 0);
        ucs_string_buffer_appendf(&strb, "%040d", 0);
        CHECK(strlen(ucs_string_buffer_cstr(&strb)) == sizeof(fixed) - 1);
    }
    {
        UCS_STRING_BUFFER_ONSTACK(strb, 64);
        CHECK(strcmp(ucs_string_buffer_cstr(&strb), "") == 0);
        ucs_string_buffer_appendf(&strb, "%s", "x");
        CHECK(strcmp(ucs_string_buffer_cstr(&strb), "x") == 0);
    }
    {
        /* Dynamic storage grows; it is malloc'd memory. */
        ucs_string_buffer_t strb = UCS_STRING_BUFFER_INITIALIZER;
        int i;
        CHECK(strcmp(ucs_string_buffer_cstr(&strb), "") == 0);
        for (i = 0; i < 100; ++i) {
            ucs_string_buffer_appendf(&strb, "%02d", i);
        }
        CHECK(strlen(ucs_string_buffer_cstr(&strb)) == 200);
        CHECK(strncmp(ucs_string_buffer_cstr(&strb), "000102", 6) == 0);
        free(strb.str.buffer);
    }
}

static void system_queries(void)
{
    cpu_set_t set;
    int fd;
    int one = 1;
    unsigned char async[512];
    double hz;

    CHECK(ucs_get_page_size() == (size_t)sysconf(_SC_PAGESIZE));
    CHECK(ucs_sys_get_num_cpus() >= 1);
    CHECK(ucs_sys_getaffinity(&set) == 0);
    CHECK(CPU_COUNT(&set) >= 1);
    CHECK(ucs_sys_setaffinity(&set) == 0);

    ucs_x86_init_tsc_freq();
    CHECK((ucs_arch_x86_enable_rdtsc == 0) || (ucs_arch_x86_enable_rdtsc == 1));
    hz = ucs_get_cpu_clocks_per_sec();
    CHECK(hz >= 1e6);
    printf("clock: %s at %.0f Hz\n", ucs_arch_x86_enable_rdtsc ? "rdtsc" : "gettimeofday",
           hz);

    fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0);
    CHECK(ucs_socket_setopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == UCS_OK);
    CHECK(ucs_socket_setopt(fd, SOL_SOCKET, 12345, &one, sizeof(one)) != UCS_OK);
    ucs_close_fd(&fd);
    CHECK(fd == -1);
    ucs_close_fd(&fd); /* -1: nothing to close */

    memset(async, 0xa5, sizeof(async));
    CHECK(ucs_async_context_init(async, UCS_ASYNC_MODE_THREAD_SPINLOCK) == UCS_OK);
    CHECK(async[48] == 0xa5); /* nothing written past the 48 bytes rucx uses */
    ucs_async_context_cleanup(async);

    CHECK(ucs_stats_get_root() == NULL);
    ucs_empty_function();
    CHECK(ucs_empty_function_return_success() == UCS_OK);
}

static void logging(void)
{
    /* The header's macros read the level from ucs_global_opts (the program's copy). */
    CHECK(ucs_global_opts.log_component.log_level == UCS_LOG_LEVEL_WARN);
    ucs_warn("warning number %d", 17);
    ucs_debug("not printed at the default level");
    ucs_global_opts.log_component.log_level = UCS_LOG_LEVEL_DEBUG;
    ucs_debug("debug line %s", "shown");
    ucs_global_opts.log_component.log_level = UCS_LOG_LEVEL_WARN;
    CHECK(strcmp(ucs_status_string(UCS_ERR_NO_MEMORY), "Out of memory") == 0);
}

int main(int argc, char **argv)
{
    strings();
    system_queries();
    logging();
    if ((argc > 1) && (strcmp(argv[1], "fatal") == 0)) {
        ucs_fatal_error_format(__FILE__, __LINE__, __func__,
                               "the program's own fatal error %d", 3);
    }
    printf("UCS UTIL OK\n");
    return 0;
}
