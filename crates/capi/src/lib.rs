//! rucx C ABI (libucp.so.0 and friends).
