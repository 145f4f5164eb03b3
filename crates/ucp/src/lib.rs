//! rucx protocol layer.
