//! rucx collectives over ucp.
