//! rucx dev-only test harness: process spawning, conformance suites, simulated fabric.
