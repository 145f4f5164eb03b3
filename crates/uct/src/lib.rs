//! rucx transport layer: memory domains, interfaces, endpoints; self and shm transports.
