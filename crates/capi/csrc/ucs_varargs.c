/*
 * rucx: the parts of libucs's interface that C programs reach and that stable Rust cannot
 * express: functions taking a variable argument list, and data objects that a program's
 * inline code reads (a program built against UCX may keep its own copy of them, made by
 * a copy relocation at load time, so they are defined here in C, where every access goes
 * through the global offset table and sees that copy).
 *
 * Written for rucx from the interface facts of UCX 1.13's headers (names, layouts,
 * numeric values); see docs/c-abi.md, "UCS utilities".
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* ---- data ------------------------------------------------------------------------ */

/* ucs_log_level_t values (config/types.h). */
enum {
    RUCX_LOG_FATAL = 0,
    RUCX_LOG_ERROR = 1,
    RUCX_LOG_WARN  = 2,
    RUCX_LOG_DIAG  = 3,
    RUCX_LOG_INFO  = 4,
    RUCX_LOG_DEBUG = 5,
    RUCX_LOG_TRACE = 6,
    RUCX_LOG_LAST  = 12,
    RUCX_LOG_PRINT = 13
};

/* ucs_log_component_config_t (config/types.h). */
struct rucx_log_component {
    int         log_level;
    char        name[16];
    const char *file_filter;
};

/* ucs_global_opts_t is 360 bytes on x86-64 in UCX 1.13. Programs read the log component
 * (its level gates their logging macros) and, in inline copy helpers, the two size_t
 * fields of the architecture options (0 and 0 disable the "rep movsb" path). Nothing
 * else in it is used by rucx; the rest stays zero. */
#define RUCX_GLOBAL_OPTS_SIZE 360
struct rucx_global_opts {
    struct rucx_log_component log_component;
    unsigned char             rest[RUCX_GLOBAL_OPTS_SIZE - sizeof(struct rucx_log_component)];
};
_Static_assert(sizeof(struct rucx_log_component) == 32, "ucs_log_component_config_t");
_Static_assert(sizeof(struct rucx_global_opts) == RUCX_GLOBAL_OPTS_SIZE, "ucs_global_opts_t");

struct rucx_global_opts ucs_global_opts = {
    .log_component = { RUCX_LOG_WARN, "UCX", "*" },
};

/* ucs_ternary_auto_value_t: 0 no, 1 yes, 2 try (not decided yet). Programs' inline clock
 * reads test it and call ucs_x86_init_tsc_freq() (crates/capi/src/ucs_util.rs) while it
 * is "try". */
int ucs_arch_x86_enable_rdtsc = 2;

/* For the Rust side, which must not hold a direct address of the object above (a
 * program's copy may be the live one): C code reaches it through the GOT. */
int *rucx_ucs_arch_x86_enable_rdtsc_ptr(void)
{
    return &ucs_arch_x86_enable_rdtsc;
}

/* UCX_LOG_LEVEL, read when the library is loaded so that the level is right before the
 * program's first logging macro runs. */
static int rucx_parse_log_level(const char *s)
{
    static const char *const names[] = {
        "fatal", "error", "warn", "diag", "info", "debug", "trace",
        "req", "data", "async", "func", "poll"
    };
    size_t i;

    for (i = 0; i < sizeof(names) / sizeof(names[0]); ++i) {
        if (strcasecmp(s, names[i]) == 0) {
            return (int)i;
        }
    }
    if (strncasecmp(s, "trace_", 6) == 0) {
        for (i = 7; i < sizeof(names) / sizeof(names[0]); ++i) {
            if (strcasecmp(s + 6, names[i]) == 0) {
                return (int)i;
            }
        }
    }
    return -1;
}

__attribute__((constructor)) static void rucx_ucs_read_log_level(void)
{
    const char *v = getenv("UCX_LOG_LEVEL");
    int level;

    if (v != NULL) {
        level = rucx_parse_log_level(v);
        if (level >= 0) {
            ucs_global_opts.log_component.log_level = level;
        }
    }
}

/* ---- strings ------------------------------------------------------------------------ */

void ucs_snprintf_safe(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;

    if ((buf == NULL) || (size == 0)) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(buf, size, fmt, ap);
    va_end(ap);
    buf[size - 1] = '\0';
}

void ucs_snprintf_zero(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;

    if ((buf == NULL) || (size == 0)) {
        return;
    }
    memset(buf, 0, size);
    va_start(ap, fmt);
    vsnprintf(buf, size, fmt, ap);
    va_end(ap);
}

/* ucs_string_buffer_t: { char *buffer; size_t length; size_t capacity; } where bit 0 of
 * capacity marks caller-provided fixed storage and the other bits are the capacity in
 * bytes (including room for the terminating NUL). Dynamic storage is malloc'd, so the
 * caller's ucs_string_buffer_cleanup / free releases it. */
struct rucx_string_buffer {
    char  *buffer;
    size_t length;
    size_t capacity;
};

#define RUCX_STRB_FIXED ((size_t)1)

static size_t rucx_strb_capacity(const struct rucx_string_buffer *s)
{
    return s->capacity & ~RUCX_STRB_FIXED;
}

/* Makes room for `extra` more characters and the NUL; returns 0 if storage is fixed and
 * too small (the text is then truncated), or if memory ran out. */
static int rucx_strb_reserve(struct rucx_string_buffer *s, size_t extra)
{
    size_t need = s->length + extra + 1;
    size_t cap  = rucx_strb_capacity(s);
    char  *p;

    if (need <= cap) {
        return 1;
    }
    if (s->capacity & RUCX_STRB_FIXED) {
        return 0;
    }
    if (cap < 32) {
        cap = 32;
    }
    while (cap < need) {
        cap *= 2;
    }
    p = realloc(s->buffer, cap);
    if (p == NULL) {
        return 0;
    }
    s->buffer   = p;
    s->capacity = cap; /* even: bit 0 stays clear */
    return 1;
}

void ucs_string_buffer_appendf(struct rucx_string_buffer *strb, const char *fmt, ...)
{
    va_list ap;
    int     n;
    size_t  room;

    if ((strb == NULL) || (fmt == NULL)) {
        return;
    }
    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        return;
    }
    if (!rucx_strb_reserve(strb, (size_t)n)) {
        /* Fixed storage (or no memory): keep what fits. */
        if (rucx_strb_capacity(strb) <= strb->length + 1) {
            return;
        }
    }
    room = rucx_strb_capacity(strb) - strb->length;
    va_start(ap, fmt);
    vsnprintf(strb->buffer + strb->length, room, fmt, ap);
    va_end(ap);
    strb->length += ((size_t)n < room) ? (size_t)n : room - 1;
}

/* ---- logging and fatal errors ------------------------------------------------------- */

static const char *rucx_log_level_name(int level)
{
    static const char *const names[] = {
        "FATAL", "ERROR", "WARN", "DIAG", "INFO", "DEBUG", "TRACE",
        "REQ", "DATA", "ASYNC", "FUNC", "POLL"
    };

    if ((level >= 0) && (level < (int)(sizeof(names) / sizeof(names[0])))) {
        return names[level];
    }
    return "PRINT";
}

static const char *rucx_basename(const char *path)
{
    const char *slash;

    if (path == NULL) {
        return "?";
    }
    slash = strrchr(path, '/');
    return (slash != NULL) ? slash + 1 : path;
}

/* One message per call, written with a single fprintf so that lines of different
 * processes do not interleave: "[seconds.micros] [host:pid] file:line LEVEL message". */
static void rucx_log_vprint(const char *file, unsigned line, int level,
                            const char *component, const char *fmt, va_list ap)
{
    char            msg[1024];
    char            host[64];
    struct timespec ts;

    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (level == RUCX_LOG_PRINT) {
        fprintf(stdout, "%s\n", msg);
        fflush(stdout);
        return;
    }
    if (gethostname(host, sizeof(host)) != 0) {
        strcpy(host, "?");
    }
    host[sizeof(host) - 1] = '\0';
    clock_gettime(CLOCK_REALTIME, &ts);
    fprintf(stderr, "[%lld.%06ld] [%s:%d] %16s:%-4u %s %-5s %s\n", (long long)ts.tv_sec,
            ts.tv_nsec / 1000, host, (int)getpid(), rucx_basename(file), line,
            component, rucx_log_level_name(level), msg);
}

void ucs_log_dispatch(const char *file, unsigned line, const char *function, int level,
                      struct rucx_log_component *comp_conf, const char *format, ...)
{
    va_list     ap;
    const char *component = "UCX";
    char        name[17];

    (void)function;
    if (format == NULL) {
        return;
    }
    if (comp_conf != NULL) {
        if ((level != RUCX_LOG_PRINT) && (level > comp_conf->log_level)) {
            return;
        }
        memcpy(name, comp_conf->name, 16);
        name[16] = '\0';
        if (name[0] != '\0') {
            component = name;
        }
    }
    va_start(ap, format);
    rucx_log_vprint(file, line, level, component, format, ap);
    va_end(ap);
}

/* The calling program's own fatal error (an assertion of its inline code or its
 * ucs_fatal() macro): report it and abort, as the program expects. rucx's library code
 * never calls this. */
void ucs_fatal_error_format(const char *file, unsigned line, const char *function,
                            const char *format, ...)
{
    va_list ap;
    char    msg[1024];

    msg[0] = '\0';
    if (format != NULL) {
        va_start(ap, format);
        vsnprintf(msg, sizeof(msg), format, ap);
        va_end(ap);
    }
    fprintf(stderr, "[%d] %s:%u %s(): Fatal: %s\n", (int)getpid(), rucx_basename(file),
            line, (function != NULL) ? function : "?", msg);
    fflush(stderr);
    abort();
}
