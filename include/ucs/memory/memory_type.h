/*
 * rucx — C headers of the UCX 1.13 API, written for rucx.
 * Memory types. rucx handles host memory only.
 */
#ifndef UCS_MEMORY_TYPE_H_
#define UCS_MEMORY_TYPE_H_

#include <ucs/sys/compiler_def.h>

BEGIN_C_DECLS

typedef enum ucs_memory_type {
    UCS_MEMORY_TYPE_HOST,
    UCS_MEMORY_TYPE_CUDA,
    UCS_MEMORY_TYPE_CUDA_MANAGED,
    UCS_MEMORY_TYPE_ROCM,
    UCS_MEMORY_TYPE_ROCM_MANAGED,
    UCS_MEMORY_TYPE_LAST,
    UCS_MEMORY_TYPE_UNKNOWN = UCS_MEMORY_TYPE_LAST
} ucs_memory_type_t;

#define UCS_MEMORY_TYPES_CPU_ACCESSIBLE \
    (UCS_BIT(UCS_MEMORY_TYPE_HOST) | UCS_BIT(UCS_MEMORY_TYPE_ROCM_MANAGED))

#define ucs_memory_type_for_each(_t) \
    for ((_t) = UCS_MEMORY_TYPE_HOST; (_t) < UCS_MEMORY_TYPE_LAST; (_t)++)

/* Short names of the memory types, indexed by ucs_memory_type_t ("host", ...). */
extern const char *ucs_memory_type_names[];
extern const char *ucs_memory_type_descs[];

END_C_DECLS

#endif
