//! Shared-memory segments are private and do not outlive their owner.
//!
//! A `hold-segment` peer opens an shm interface (its receive FIFO segment) and allocates
//! memory from its memory domain (a second segment). While it runs, both segments are
//! memfds of mode 0600, seen both through the peer's /proc/<pid>/fd and through an
//! attached `ShmSegment`. After the peer exits (normally, or by SIGKILL) no process on
//! the host holds a descriptor or mapping of either file any more (so the kernel freed
//! it), attaching to its `SegmentId` fails, and /dev/shm has no new entries.

use testkit::{hex, procfs, Peer, STEP_TIMEOUT};
use ucs::sys::{SegmentId, ShmSegment};
use uct::rkey::{PackedRkey, RkeyKind};
use uct::shm::address::ShmIfaceAddr;

const PEER: &str = env!("CARGO_BIN_EXE_rucx-testpeer");

enum End {
    Exit,
    Kill,
}

fn segments_vanish(end: End) {
    let _serial = testkit::heavy_test();
    let before = procfs::dev_shm_entries();
    let mut p = Peer::spawn(PEER, &["hold-segment", "1048581"]).unwrap();
    let iface = hex::decode(&p.expect("iface", STEP_TIMEOUT).unwrap().concat()).unwrap();
    let mem = hex::decode(&p.expect("mem", STEP_TIMEOUT).unwrap().concat()).unwrap();
    let fifo_seg = ShmIfaceAddr::decode(&iface).unwrap().seg;
    let key = PackedRkey::decode(&mem).unwrap();
    assert_eq!(
        key.kind,
        RkeyKind::Segment,
        "mem_alloc memory must be a segment"
    );
    // The key names the segment by descriptor and registration id (its memfd's name);
    // the inode comes from /proc.
    let fd = i32::try_from(key.fd).unwrap();
    let info = procfs::fd_info(p.pid(), fd).unwrap();
    assert_eq!(
        info.target,
        format!("/memfd:rucx-mem-{} (deleted)", key.id),
        "mem_alloc segment: name"
    );
    let mem_seg = SegmentId {
        pid: key.pid.expect("a uct key names its owner"),
        fd,
        ino: info.ino,
        len: key.len,
    };

    let mut files: Vec<(&str, SegmentId, u64)> = Vec::new();
    for (name, id) in [("fifo segment", fifo_seg), ("mem_alloc segment", mem_seg)] {
        assert_eq!(id.pid, p.pid(), "{name}: owner pid");
        let info = procfs::fd_info(p.pid(), id.fd).unwrap();
        assert_eq!(info.mode, 0o600, "{name}: mode seen in /proc ({info:?})");
        assert_eq!(info.ino, id.ino, "{name}: inode");
        assert!(info.size >= id.len, "{name}: size");
        assert!(
            info.target.starts_with("/memfd:"),
            "{name}: not a memfd: {info:?}"
        );
        let seg = ShmSegment::attach(&id).unwrap();
        assert_eq!(
            seg.mode().unwrap(),
            0o600,
            "{name}: mode of the attached segment"
        );
        drop(seg);
        // Only the owner holds it now (this process dropped its attachment).
        let holders = procfs::holders_of(info.dev, info.ino);
        let owner = p.pid().to_string();
        assert!(
            !holders.is_empty() && holders.iter().all(|h| h.starts_with(&format!("{owner} "))),
            "{name}: held by {holders:?}"
        );
        files.push((name, id, info.dev));
    }
    let during = procfs::dev_shm_entries();
    assert!(
        during.is_subset(&before),
        "new in /dev/shm: {:?}",
        during.difference(&before)
    );

    match end {
        End::Exit => {
            p.send("exit").unwrap();
            assert!(p.expect_exit(STEP_TIMEOUT).unwrap().success());
        }
        End::Kill => {
            use std::os::unix::process::ExitStatusExt;
            let status = p.kill().unwrap();
            assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}");
        }
    }

    for (name, id, dev) in files {
        let holders = procfs::holders_of(dev, id.ino);
        assert!(
            holders.is_empty(),
            "{name} still held after the owner ended: {holders:?}"
        );
        assert!(
            ShmSegment::attach(&id).is_err(),
            "{name}: attach after the owner ended"
        );
    }
    let after = procfs::dev_shm_entries();
    assert!(
        after.is_subset(&before),
        "new in /dev/shm: {:?}",
        after.difference(&before)
    );
}

#[test]
fn segments_are_owner_only_and_vanish_after_normal_exit() {
    segments_vanish(End::Exit);
}

#[test]
fn segments_are_owner_only_and_vanish_after_sigkill() {
    segments_vanish(End::Kill);
}
