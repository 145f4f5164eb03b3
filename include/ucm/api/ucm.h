/*
 * rucx — C headers of the UCX 1.13 API, written for rucx.
 * Memory events (libucm). rucx keeps no registration cache and installs no memory
 * hooks; see docs/c-abi.md for what each function does.
 */
#ifndef UCM_H_
#define UCM_H_

#include <ucs/sys/compiler_def.h>
#include <ucs/type/status.h>
#include <ucs/memory/memory_type.h>
#include <sys/types.h>

BEGIN_C_DECLS

typedef enum ucm_event_type {
    UCM_EVENT_NONE                = 0,
    UCM_EVENT_MMAP                = UCS_BIT(0),
    UCM_EVENT_MUNMAP              = UCS_BIT(1),
    UCM_EVENT_MREMAP              = UCS_BIT(2),
    UCM_EVENT_SHMAT               = UCS_BIT(3),
    UCM_EVENT_SHMDT               = UCS_BIT(4),
    UCM_EVENT_SBRK                = UCS_BIT(5),
    UCM_EVENT_MADVISE             = UCS_BIT(6),
    UCM_EVENT_BRK                 = UCS_BIT(7),
    UCM_EVENT_VM_MAPPED           = UCS_BIT(16),
    UCM_EVENT_VM_UNMAPPED         = UCS_BIT(17),
    UCM_EVENT_MEM_TYPE_ALLOC      = UCS_BIT(20),
    UCM_EVENT_MEM_TYPE_FREE       = UCS_BIT(21),
    UCM_EVENT_FLAG_NO_INSTALL     = UCS_BIT(24),
    UCM_EVENT_FLAG_EXISTING_ALLOC = UCS_BIT(25)
} ucm_event_type_t;

/* The details of one event; which member applies depends on the event type. */
typedef union ucm_event {
    struct { void *result; void *address; size_t size; int prot; int flags; int fd;
             off_t offset; } mmap;
    struct { int result; void *address; size_t size; } munmap;
    struct { void *result; void *address; size_t old_size; size_t new_size;
             int flags; } mremap;
    struct { void *result; int shmid; const void *shmaddr; int shmflg; } shmat;
    struct { int result; const void *shmaddr; } shmdt;
    struct { void *result; intptr_t increment; } sbrk;
    struct { int result; void *addr; size_t length; int advice; } madvise;
    struct { int result; void *addr; } brk;
    struct { void *address; size_t size; } vm_mapped, vm_unmapped;
    struct { void *address; size_t size; ucs_memory_type_t mem_type; } mem_type;
} ucm_event_t;

typedef void (*ucm_event_callback_t)(ucm_event_type_t event_type, ucm_event_t *event,
                                     void *arg);

/* rucx: UCS_ERR_UNSUPPORTED (no hooks). */
ucs_status_t ucm_set_event_handler(int events, int priority, ucm_event_callback_t cb,
                                   void *arg);
void ucm_unset_event_handler(int events, ucm_event_callback_t cb, void *arg);

/* Declares that the application reports these events itself (recorded only). */
void ucm_set_external_event(int events);
void ucm_unset_external_event(int events);

/* rucx: UCS_OK (nothing in rucx depends on memory events). */
ucs_status_t ucm_test_events(int events);
ucs_status_t ucm_test_external_events(int events);

/* Reports that memory was mapped / is about to be unmapped (rucx: nothing to do). */
void ucm_vm_mmap(void *addr, size_t length);
void ucm_vm_munmap(void *addr, size_t length);

END_C_DECLS

#endif
