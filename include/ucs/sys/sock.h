/*
 * rucx — C headers of the UCX 1.13 API, written for rucx.
 * Socket-address helpers of libucs that rucx provides.
 */
#ifndef UCS_SOCKET_H
#define UCS_SOCKET_H

#include <ucs/sys/compiler_def.h>
#include <sys/socket.h>

BEGIN_C_DECLS

/* Writes "address:port" of an IPv4 or IPv6 address into str (at most max_size bytes
 * with the terminating NUL) and returns str. */
const char *ucs_sockaddr_str(const struct sockaddr *sock_addr, char *str, size_t max_size);

END_C_DECLS

#endif
