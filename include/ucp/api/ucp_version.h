/*
 * rucx — C headers of the UCX 1.13 API, written for rucx.
 * The API version these headers describe.
 */
#ifndef UCP_VERSION_H_
#define UCP_VERSION_H_

#define UCP_VERSION_MAJOR_SHIFT 24
#define UCP_VERSION_MINOR_SHIFT 16
#define UCP_VERSION(_major, _minor) \
    (((_major) << UCP_VERSION_MAJOR_SHIFT) | ((_minor) << UCP_VERSION_MINOR_SHIFT))

#define UCP_API_MAJOR   1
#define UCP_API_MINOR   13
#define UCP_API_VERSION UCP_VERSION(1, 13)

/* rucx's own version (ucp_get_version_string names both). */
#define RUCX_VERSION_STRING "0.1.0"

#endif
