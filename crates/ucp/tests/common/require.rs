//! `RUCX_REQUIRE`: a test that cannot run here skips with a message, or fails when the
//! variable names the missing feature (CI sets it). The same lines as
//! `testkit::require` (where they are tested), which this test crate does not depend on.

/// The features a test may require of the machine (see `testkit::require::FEATURES`).
pub const FEATURES: &[&str] = &["netns", "mpi", "ipv6", "wakeup", "ucx", "nm"];

/// True when `RUCX_REQUIRE` (comma-separated) names `feature` or `all`; panics on a
/// name that is no feature.
pub fn required(feature: &str) -> bool {
    let Ok(list) = std::env::var("RUCX_REQUIRE") else {
        return false;
    };
    let mut hit = false;
    for f in list.split(',').map(str::trim).filter(|f| !f.is_empty()) {
        assert!(
            f == "all" || FEATURES.contains(&f),
            "RUCX_REQUIRE names '{f}', which is none of {FEATURES:?} (or all)"
        );
        hit |= f == feature || f == "all";
    }
    hit
}

/// The calling test cannot run (or check everything) for want of `feature`, because of
/// `why`: a message, or a panic when `RUCX_REQUIRE` names the feature.
#[track_caller]
pub fn skip(feature: &str, why: &str) {
    assert!(FEATURES.contains(&feature), "unknown feature '{feature}'");
    if required(feature) {
        panic!("RUCX_REQUIRE names {feature}, but this test cannot run: {why}");
    }
    eprintln!("SKIPPED ({feature}; RUCX_REQUIRE={feature} makes this a failure): {why}");
}
