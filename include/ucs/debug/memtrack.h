/*
 * rucx — C headers of the UCX 1.13 API, written for rucx.
 * Memory tracking hooks (rucx records nothing).
 */
#ifndef UCS_MEMTRACK_H_
#define UCS_MEMTRACK_H_

#include <ucs/sys/compiler_def.h>

BEGIN_C_DECLS

void ucs_memtrack_allocated(void *ptr, size_t size, const char *name);
void ucs_memtrack_releasing(void *ptr);

END_C_DECLS

#endif
