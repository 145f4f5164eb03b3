/*
 * rucx — C headers of the UCX 1.13 API, written for rucx.
 * Compiler helpers used by the other headers.
 */
#ifndef UCS_COMPILER_DEF_H
#define UCS_COMPILER_DEF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#  define BEGIN_C_DECLS extern "C" {
#  define END_C_DECLS   }
#else
#  define BEGIN_C_DECLS
#  define END_C_DECLS
#endif

/* Bit i set, and the i lowest bits set. */
#define UCS_BIT(i)      (1ul << (i))
#define UCS_MASK(i)     (UCS_BIT(i) - 1)

/* Packs an enum into the smallest integer type (ucs_status_t is one byte). */
#define UCS_S_PACKED    __attribute__((packed))

#define UCS_F_ALWAYS_INLINE  inline __attribute__((always_inline))
#define UCS_F_NOINLINE       __attribute__((noinline))
#define UCS_F_MAYBE_UNUSED   __attribute__((used))
#define UCS_V_UNUSED         __attribute__((unused))
#define UCS_F_PRINTF(fmt, va) __attribute__((format(printf, fmt, va)))

#define ucs_typeof(_type)    __typeof__(_type)

/* Pointer arithmetic in bytes, and the distance between two pointers in bytes. */
#define UCS_PTR_BYTE_OFFSET(_ptr, _offset) ((void*)((intptr_t)(_ptr) + (intptr_t)(_offset)))
#define UCS_PTR_TYPE_OFFSET(_ptr, _type)   ((void*)((ucs_typeof(_type)*)(_ptr) + 1))
#define UCS_PTR_BYTE_DIFF(_start, _end)    ((ptrdiff_t)((uintptr_t)(_end) - (uintptr_t)(_start)))

/* The struct that contains member _member at _ptr. */
#define ucs_container_of(_ptr, _type, _member) \
    ((_type*)((char*)(void*)(_ptr) - offsetof(_type, _member)))

#define ucs_field_sizeof(_type, _field) sizeof(((_type*)0)->_field)

#define ucs_likely(x)        __builtin_expect(!!(x), 1)
#define ucs_unlikely(x)      __builtin_expect(!!(x), 0)
#define ucs_offsetof(t, m)   offsetof(t, m)
#define ucs_static_array_size(a) (sizeof(a) / sizeof((a)[0]))

#endif
