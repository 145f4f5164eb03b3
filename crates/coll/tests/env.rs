//! `UCX_COLL_<NAME>_ALG` and the other variables are read from the environment (one test
//! in its own binary, so that setting variables races with nothing).

use coll::{Alg, CollType, Options};

#[test]
fn variables_are_read() {
    std::env::set_var("UCX_COLL_ALLREDUCE_ALG", "ring");
    std::env::set_var("UCX_COLL_ALLTOALL_ALG", "Bruck");
    std::env::set_var("UCX_COLL_KNOMIAL_RADIX", "3");
    std::env::set_var("UCX_COLL_OVERSUBSCRIBED", "y");
    std::env::set_var("UCX_COLL_TIMEOUT", "7s");
    let o = Options::from_env().unwrap();
    assert_eq!(o.forced.get(CollType::Allreduce), Some(Alg::Ring));
    assert_eq!(o.forced.get(CollType::Alltoall), Some(Alg::Bruck));
    assert_eq!(o.forced.get(CollType::Bcast), None);
    assert_eq!(o.radix, 3);
    assert_eq!(o.oversubscribed, Some(true));
    assert_eq!(o.timeout, std::time::Duration::from_secs(7));
    // Registered, so not reported as unknown.
    assert!(!ucs::config::unknown_vars()
        .iter()
        .any(|v| v.starts_with("UCX_COLL_")));
    // A name that is not an algorithm of that collective is an error.
    std::env::set_var("UCX_COLL_BCAST_ALG", "ring");
    assert!(Options::from_env().is_err());
    std::env::set_var("UCX_COLL_BCAST_ALG", "auto");
    assert!(Options::from_env().is_ok());
    // The segment paths: forced by name where they exist, refused where they do not.
    std::env::set_var("UCX_COLL_GATHER_ALG", "shm");
    std::env::set_var("UCX_COLL_BARRIER_ALG", "hier");
    std::env::set_var("UCX_COLL_SHM", "n");
    std::env::set_var("UCX_COLL_HOST_GROUP_SIZE", "2");
    let o = Options::from_env().unwrap();
    assert_eq!(o.forced.get(CollType::Gather), Some(Alg::Shm));
    assert_eq!(o.forced.get(CollType::Barrier), Some(Alg::Hier));
    assert!(!o.shm);
    assert_eq!(o.host_group_size, 2);
    for (var, bad) in [
        ("UCX_COLL_ALLTOALLV_ALG", "shm"),
        ("UCX_COLL_ALLGATHER_ALG", "hier"),
        ("UCX_COLL_SHM", "maybe"),
    ] {
        let old = std::env::var(var).ok();
        std::env::set_var(var, bad);
        assert!(Options::from_env().is_err(), "{var}={bad}");
        match old {
            Some(v) => std::env::set_var(var, v),
            None => std::env::remove_var(var),
        }
    }
}
