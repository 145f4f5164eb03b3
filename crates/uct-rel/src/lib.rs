//! rucx sans-IO reliability engine for datagram transports.
