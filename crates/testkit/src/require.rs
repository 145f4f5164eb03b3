//! Tests that need something of the machine (root for network namespaces, Open MPI, an
//! IPv6 loopback, ...) skip with a message where it is missing, so that a developer's
//! `cargo test` passes on any box. Where the machine is supposed to have it (CI), a skip
//! would hide a test that never ran: `RUCX_REQUIRE` lists the features that must be there,
//! and a test that cannot run for want of one of them fails instead.
//!
//! `RUCX_REQUIRE` is a comma-separated list of [`FEATURES`] (or `all`); an unknown name
//! fails every test that asks, so that a typo cannot make a requirement silently vanish.
//! `crates/ucp/tests/common` and `crates/capi/tests/common` carry the same few lines
//! (those test crates do not depend on testkit).

/// The features a test may require of the machine.
pub const FEATURES: &[&str] = &[
    // root and iproute2: hosts in network namespaces (ip netns, veth, tc netem).
    "netns",  // Open MPI (mpicc, oshcc, mpirun) and its UCX components.
    "mpi",    // An IPv6 loopback (::1).
    "ipv6",   // /proc showing that a process sleeps in poll (the wakeup tests).
    "wakeup", // UCX's headers, example sources and tools (libucx-dev, ucx-utils).
    "ucx",    // binutils' nm (symbol checks of the C libraries).
    "nm",
];

/// True when `RUCX_REQUIRE` names `feature` (or `all`). Panics when it names a feature
/// that does not exist.
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

/// Reports that the calling test cannot run (or cannot check everything) because
/// `feature` is missing, for the reason `why`: a message on standard error, or a panic
/// (a failed test) when `RUCX_REQUIRE` names the feature. The caller returns afterwards.
#[track_caller]
pub fn skip(feature: &str, why: &str) {
    assert!(
        FEATURES.contains(&feature),
        "unknown feature '{feature}' (add it to testkit::require::FEATURES)"
    );
    if required(feature) {
        panic!("RUCX_REQUIRE names {feature}, but this test cannot run: {why}");
    }
    eprintln!("SKIPPED ({feature}; RUCX_REQUIRE={feature} makes this a failure): {why}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// The tests below change the process environment.
    static ENV: Mutex<()> = Mutex::new(());

    fn with_require<R>(v: Option<&str>, f: impl FnOnce() -> R) -> R {
        let _g = ENV.lock().unwrap_or_else(|p| p.into_inner());
        let old = std::env::var("RUCX_REQUIRE").ok();
        match v {
            Some(v) => std::env::set_var("RUCX_REQUIRE", v),
            None => std::env::remove_var("RUCX_REQUIRE"),
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        match old {
            Some(o) => std::env::set_var("RUCX_REQUIRE", o),
            None => std::env::remove_var("RUCX_REQUIRE"),
        }
        r.unwrap_or_else(|p| std::panic::resume_unwind(p))
    }

    fn skip_fails(v: Option<&str>, feature: &str) -> bool {
        with_require(v, || {
            std::panic::catch_unwind(|| skip(feature, "test")).is_err()
        })
    }

    #[test]
    fn a_skip_fails_only_when_its_feature_is_required() {
        assert!(!skip_fails(None, "netns"));
        assert!(!skip_fails(Some(""), "netns"));
        assert!(!skip_fails(Some("mpi,ipv6"), "netns"));
        assert!(skip_fails(Some("netns"), "netns"));
        assert!(skip_fails(Some("mpi, netns ,ipv6"), "netns"));
        assert!(skip_fails(Some("all"), "wakeup"));
    }

    #[test]
    fn an_unknown_name_fails_instead_of_requiring_nothing() {
        assert!(skip_fails(Some("netn"), "mpi"));
        assert!(skip_fails(None, "no-such-feature"));
    }
}
