/* rucx: the UCC API version this header describes. */
#ifndef RUCX_UCC_VERSION_H
#define RUCX_UCC_VERSION_H

#define UCC_VERSION_MAJOR_SHIFT 24
#define UCC_VERSION_MINOR_SHIFT 16
#define UCC_VERSION(_major, _minor) \
    (((_major) << UCC_VERSION_MAJOR_SHIFT) | ((_minor) << UCC_VERSION_MINOR_SHIFT))

#define UCC_API_MAJOR      1
#define UCC_API_MINOR      3
#define UCC_API_VERSION    UCC_VERSION(1, 3)
#define UCC_VERSION_STRING "1.3.0"
#define UCC_GIT_REVISION   "rucx"

#endif
