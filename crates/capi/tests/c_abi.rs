//! The C ABI from C: programs in `c-tests/` compiled with `cc` against rucx's headers and
//! against UCX's (Debian's libucx-dev, when installed), run on rucx's library; the
//! exported symbol set; the struct layouts of both header sets and of the Rust mirrors.

mod common;

use common::{compile, have_ucx_headers, run_on_rucx, Headers, SERIAL};
use std::process::Command;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

/// Builds `src` with each available header set and runs it (and once more with TCP as
/// the only transport); returns the outputs.
fn build_and_run(src: &str, env: &[(&str, &str)]) -> Vec<String> {
    let mut outs = build_and_run_on(src, env);
    if env.is_empty() {
        outs.extend(
            build_and_run_on(src, &[("UCX_TLS", "tcp")])
                .into_iter()
                .take(1),
        );
    }
    outs
}

fn build_and_run_on(src: &str, env: &[(&str, &str)]) -> Vec<String> {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut sets = vec![Headers::Rucx];
    if have_ucx_headers() {
        sets.push(Headers::Ucx);
    } else {
        common::require::skip(
            "ucx",
            &format!("UCX headers (libucx-dev) not installed: {src} built with rucx's only"),
        );
    }
    sets.into_iter()
        .map(|h| {
            let prog = compile(src, h);
            let out = run_on_rucx(&prog, env, LIMIT);
            assert!(
                out.contains("library: 1.13.1 (rucx "),
                "{src} did not run on rucx's library:\n{out}"
            );
            out
        })
        .collect()
}

#[test]
fn tag_ping_pong() {
    for out in build_and_run("tag.c", &[]) {
        assert_eq!(out.matches("tag test passed").count(), 2, "{out}");
    }
}

/// Every completion shape of the nbx tag calls on one worker: completed in the call
/// (NULL, no callback) or later (a request, its callback once), receives posted first
/// or second, plain and synchronous sends, eager and rendezvous sizes, with and without
/// callbacks; every byte checked. rucx gives an operation a pooled request only when it
/// is still in progress as the call returns, so these shapes take different paths.
#[test]
fn request_completion_shapes() {
    for out in build_and_run("requests.c", &[]) {
        assert!(out.contains("requests test passed"), "{out}");
    }
}

/// Completion queues (rucx's extension header): thousands of preposted tag receives and
/// sends reporting into queues between two processes, over the default transports and
/// tcp only. Built with rucx's headers only (UCX has no such API).
#[test]
fn completion_queues() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let prog = compile("cq.c", Headers::Rucx);
    for env in [&[][..], &[("UCX_TLS", "tcp")][..]] {
        let out = run_on_rucx(&prog, env, LIMIT);
        assert!(
            out.contains("cq receiver passed") && out.contains("cq sender passed"),
            "{env:?}:\n{out}"
        );
    }
}

#[test]
fn rma_and_atomics() {
    for out in build_and_run("rma.c", &[]) {
        assert!(out.contains("rma origin passed") && out.contains("rma target passed"));
    }
    // Emulated accesses (the target executes them) through the same C calls.
    build_and_run("rma.c", &[("UCX_RMA_PATH", "am")]);
}

/// `rucx_put_signal_nbx` (`<rucx/ucp_ext.h>`, so rucx's headers only): the target sees the
/// signal only with all the data, on every path (mapped, CMA, emulated over shm, tcp and
/// udp); nbx parameters; refusals.
#[test]
fn put_with_remote_signal() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let prog = compile("put_signal.c", Headers::Rucx);
    let envs: [&[(&str, &str)]; 5] = [
        &[],
        &[("UCX_RMA_PATH", "cma")],
        &[("UCX_RMA_PATH", "am")],
        &[("UCX_TLS", "tcp")],
        &[("UCX_TLS", "udp")],
    ];
    for env in envs {
        let out = run_on_rucx(&prog, env, LIMIT);
        assert!(
            out.contains("put_signal origin passed") && out.contains("put_signal target passed"),
            "{env:?}:\n{out}"
        );
    }
}

/// Puts issued with `UCP_OP_ATTR_FLAG_NO_IMM_CMPL` (a request back even when done in the
/// call) reach the target: over shared memory and TCP only, and through every access path
/// (direct mapping by default on shm, emulated, CMA); the target checks every byte after
/// the origin's requests completed and a flush.
#[test]
fn put_with_no_imm_cmpl_reaches_the_target() {
    let mut outs = Vec::new();
    for tls in ["shm", "tcp"] {
        outs.extend(build_and_run_on("put_no_imm.c", &[("UCX_TLS", tls)]));
    }
    for path in ["am", "cma"] {
        outs.extend(build_and_run_on(
            "put_no_imm.c",
            &[("UCX_TLS", "shm"), ("UCX_RMA_PATH", path)],
        ));
    }
    for out in &outs {
        assert!(
            out.contains("put_no_imm origin passed") && out.contains("put_no_imm target passed"),
            "{out}"
        );
    }
}

/// Packed keys in a fixed 16-byte field: allocated and registered memory, default
/// transports and TCP only (and every access path: emulated, CMA), each byte checked.
#[test]
fn rkey_in_16_bytes() {
    let mut outs = build_and_run("rkey16.c", &[]);
    for path in ["am", "cma"] {
        outs.extend(build_and_run_on("rkey16.c", &[("UCX_RMA_PATH", path)]));
    }
    for out in &outs {
        assert!(
            out.contains("rkey16 origin passed") && out.contains("rkey16 target passed"),
            "{out}"
        );
        assert_eq!(out.matches("packed key of").count(), 3, "{out}");
    }
    // The sizes, for the record (`cargo test -- --nocapture`).
    for line in outs.iter().flat_map(|o| o.lines()) {
        if line.starts_with("rkey16: ") {
            eprintln!("{line}");
        }
    }
}

#[test]
fn active_messages() {
    for out in build_and_run("am.c", &[]) {
        assert!(out.contains("am sender passed") && out.contains("am receiver passed"));
    }
}

#[test]
fn streams() {
    for out in build_and_run("stream.c", &[]) {
        assert!(out.contains("stream sender passed") && out.contains("stream receiver passed"));
    }
}

#[test]
fn blocking_wait_with_the_event_fd() {
    for out in build_and_run("wakeup.c", &[]) {
        assert!(out.contains("wakeup receiver passed"), "{out}");
    }
}

/// The same programs with a progress thread in every worker (`UCX_RUCX_PROGRESS_THREAD=y`),
/// over shared memory and over tcp: blocking waits still wake up (the thread consumes the
/// descriptors' readiness and signals the worker), active-message handlers and callbacks
/// still run in the application's calls, every byte is still checked.
#[test]
fn progress_thread_keeps_the_programs_working() {
    for tls in ["shm,self", "tcp"] {
        let env = [("UCX_RUCX_PROGRESS_THREAD", "y"), ("UCX_TLS", tls)];
        for out in build_and_run_on("wakeup.c", &env) {
            assert!(out.contains("wakeup receiver passed"), "{tls}: {out}");
        }
        for out in build_and_run_on("am.c", &env) {
            assert!(
                out.contains("am sender passed") && out.contains("am receiver passed"),
                "{tls}: {out}"
            );
        }
        for out in build_and_run_on("stream.c", &env) {
            assert!(
                out.contains("stream sender passed") && out.contains("stream receiver passed"),
                "{tls}: {out}"
            );
        }
    }
}

#[test]
fn generic_datatypes() {
    for out in build_and_run("generic.c", &[]) {
        assert_eq!(
            out.matches("generic datatype test passed").count(),
            2,
            "{out}"
        );
    }
}

#[test]
fn listener_client_server() {
    for out in build_and_run("client_server.c", &[]) {
        assert!(
            out.contains("server passed") && out.contains("client passed"),
            "{out}"
        );
    }
}

#[test]
fn thread_mode_multi() {
    for out in build_and_run("threads.c", &[]) {
        assert_eq!(out.matches("threads test passed").count(), 2, "{out}");
    }
}

/// Thread mode multi does not make a thread wait for another one inside the worker:
/// progress returns 0, tag sends and receives return requests at once, and they all
/// complete (bytes checked) once the worker is released. Also with a progress thread,
/// which may be the one that starts the posted operations.
#[test]
fn thread_mode_multi_does_not_block() {
    for env in [&[][..], &[("UCX_RUCX_PROGRESS_THREAD", "y")][..]] {
        for out in build_and_run_on("threads_nonblock.c", env) {
            assert!(
                out.contains("threads nonblock test passed"),
                "{env:?}: {out}"
            );
        }
    }
}

#[test]
fn request_alloc_stream_poll_ep_modify_and_query() {
    for out in build_and_run("extras.c", &[]) {
        assert!(out.contains("extras test passed"), "{out}");
    }
}

#[test]
fn misuse_gives_errors_not_crashes() {
    for out in build_and_run("handles.c", &[]) {
        assert!(out.contains("handles test passed"), "{out}");
    }
}

#[test]
fn version_and_load_log_name_rucx() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let prog = compile("version.c", Headers::Rucx);
    let mut cmd = Command::new(&prog);
    cmd.env("LD_LIBRARY_PATH", common::lib_dir())
        .env("UCX_LOG_LEVEL", "info");
    let out = common::run(cmd, LIMIT);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("version: 1.13.1"), "{stdout}");
    assert!(
        stdout.contains(&format!("1.13.1 (rucx {})", env!("CARGO_PKG_VERSION"))),
        "{stdout}"
    );
    assert!(stdout.contains("resource 0  :"), "{stdout}");
    assert!(
        stderr.contains("rucx") && stderr.contains("loaded"),
        "no load line at UCX_LOG_LEVEL=info:\n{stderr}"
    );
}

#[test]
fn exports_are_exactly_the_version_script() {
    if !common::have("nm") {
        common::require::skip("nm", "nm not found: export check skipped");
        return;
    }
    let lib = common::cdylib();
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
        .expect("nm");
    let mut exported: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_string))
        .collect();
    exported.sort();
    let map = std::fs::read_to_string(common::root().join("crates/capi/exports.map"))
        .expect("exports.map");
    let mut listed: Vec<String> = map
        .lines()
        .map(str::trim)
        .filter(|l| l.ends_with(';') && !l.contains(':') && !l.starts_with('}') && *l != "*;")
        .map(|l| l.trim_end_matches(';').to_string())
        .collect();
    listed.sort();
    assert_eq!(exported, listed, "exported symbols differ from exports.map");
    for f in [
        "ucp_init_version",
        "ucp_tag_send_nbx",
        "ucs_status_string",
        "ucm_vm_munmap",
    ] {
        assert!(exported.iter().any(|e| e == f), "{f} not exported");
    }
    if common::have("readelf") {
        let d = Command::new("readelf")
            .arg("-d")
            .arg(&lib)
            .output()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&d.stdout).contains("[libucp.so.0]"),
            "SONAME is not libucp.so.0"
        );
    }
}

#[test]
fn open_mpi_imports_are_exported() {
    let comps = "/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3";
    let common_ucx = "/usr/lib/x86_64-linux-gnu/libmca_common_ucx.so";
    if !common::have("nm") {
        common::require::skip("nm", "nm not found: import check skipped");
        return;
    }
    if !std::path::Path::new(common_ucx).exists() {
        common::require::skip(
            "mpi",
            "Open MPI's ucx components not installed: import check skipped",
        );
        return;
    }
    let mut files: Vec<String> = std::fs::read_dir(comps)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path().display().to_string())
                .filter(|p| p.contains("ucx") && p.ends_with(".so"))
                .collect()
        })
        .unwrap_or_default();
    files.push(common_ucx.to_string());
    let lib = common::cdylib();
    let ours = String::from_utf8_lossy(
        &Command::new("nm")
            .args(["-D", "--defined-only"])
            .arg(&lib)
            .output()
            .unwrap()
            .stdout,
    )
    .into_owned();
    let mut missing = Vec::new();
    for f in &files {
        let o = Command::new("nm")
            .args(["-D", "--undefined-only", f])
            .output()
            .unwrap();
        for l in String::from_utf8_lossy(&o.stdout).lines() {
            let Some(sym) = l.split_whitespace().last() else {
                continue;
            };
            let sym = sym.split('@').next().unwrap_or(sym);
            if ["ucp_", "ucs_", "uct_", "ucm_"]
                .iter()
                .any(|p| sym.starts_with(p))
                && !ours.lines().any(|x| x.ends_with(&format!(" {sym}")))
            {
                missing.push(format!("{sym} ({f})"));
            }
        }
    }
    assert!(missing.is_empty(), "not exported: {missing:?}");
}

/// UCX's own example program (shipped by Debian's libucx-dev, not part of rucx), built
/// with UCX's headers and with rucx's, run as server and client on rucx in its three
/// modes: busy polling with probe, `ucp_worker_wait`, and the event descriptor.
#[test]
fn ucx_hello_world_example_runs_on_rucx() {
    let dir = std::path::Path::new("/usr/share/doc/libucx-dev/examples");
    let src = dir.join("ucp_hello_world.c");
    if !src.exists() {
        common::require::skip(
            "ucx",
            &format!("{} not found (libucx-dev): skipped", src.display()),
        );
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for headers in [Headers::Rucx, Headers::Ucx] {
        let out = common::bin_dir().join(format!("ucp_hello_world-{}", headers.name()));
        let mut cc = Command::new("cc");
        cc.args(["-O1", "-o"]).arg(&out).arg(&src);
        if headers == Headers::Rucx {
            cc.arg(format!("-I{}", common::root().join("include").display()));
        }
        cc.arg(format!("-L{}", common::lib_dir().display()))
            .args(["-lucp", "-lucs"]);
        let o = cc.output().expect("cc");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        for mode in ["-b", "-w", "-f"] {
            // The example refuses port 0 and prints nothing once it listens: the port is
            // one the kernel just chose for us, and the server is ready when the kernel
            // shows its listening socket. A server that could not take the port (someone
            // took it meanwhile) ends before it listens; it is started again on another.
            let (port, srv) = (0..5)
                .find_map(|_| {
                    let port = common::free_port().to_string();
                    let mut server = Command::new(&out);
                    server
                        .args([mode, "-p", &port])
                        .env("LD_LIBRARY_PATH", common::lib_dir());
                    let (tx, rx) = std::sync::mpsc::channel();
                    let srv = std::thread::spawn(move || {
                        common::run_with(server, LIMIT, |pid| tx.send(pid).unwrap())
                    });
                    let pid = rx.recv().expect("server started");
                    let p: u16 = port.parse().unwrap();
                    if common::await_listening(pid, p, LIMIT, || srv.is_finished()) {
                        return Some((port, srv));
                    }
                    let o = srv.join().expect("server thread");
                    eprintln!(
                        "server {mode} on port {port} ended before it listened ({}): {}",
                        o.status,
                        String::from_utf8_lossy(&o.stderr)
                    );
                    None
                })
                .expect("the server never listened");
            let mut client = Command::new(&out);
            client
                .args([mode, "-p", &port, "-n", "127.0.0.1"])
                .env("LD_LIBRARY_PATH", common::lib_dir());
            let c = common::run(client, LIMIT);
            let s = srv.join().expect("server thread");
            for (who, r) in [("client", &c), ("server", &s)] {
                assert!(
                    r.status.success(),
                    "{who} {mode} ({} headers) failed:\n{}\n{}",
                    headers.name(),
                    String::from_utf8_lossy(&r.stdout),
                    String::from_utf8_lossy(&r.stderr)
                );
            }
            let text = String::from_utf8_lossy(&c.stdout);
            assert!(text.contains("UCP TEST SUCCESS"), "client {mode}:\n{text}");
        }
    }
}

/// Sizes and offsets printed by `c-tests/abi_layout.c`.
fn layout(headers: Headers) -> String {
    let prog = compile("abi_layout.c", headers);
    run_on_rucx(&prog, &[], LIMIT)
}

#[test]
fn struct_layouts_match_ucx() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let ours = layout(Headers::Rucx);
    if have_ucx_headers() {
        let theirs = layout(Headers::Ucx);
        for (a, b) in ours.lines().zip(theirs.lines()) {
            assert_eq!(a, b, "rucx's headers differ from UCX's");
        }
        assert_eq!(ours.lines().count(), theirs.lines().count());
    } else {
        common::require::skip(
            "ucx",
            "UCX headers not installed: compared with the Rust mirrors only",
        );
    }
    // The Rust mirrors against the C headers.
    use rucx_capi::ffi::*;
    use std::mem::{offset_of, size_of};
    macro_rules! check {
        ($t:ident $(, $f:ident)*) => {{
            let want = format!("sizeof {} {}", stringify!($t), size_of::<$t>());
            assert!(ours.lines().any(|l| l.starts_with(&format!("{want} "))),
                    "{want} not in the C layout");
            $(
                let want = format!("offsetof {}.{} {} ", stringify!($t), stringify!($f),
                                   offset_of!($t, $f));
                assert!(ours.lines().any(|l| l.starts_with(&want)), "{want} not in the C layout");
            )*
        }};
    }
    check!(
        ucp_params_t,
        features,
        request_size,
        request_init,
        request_cleanup,
        tag_sender_mask,
        mt_workers_shared,
        estimated_num_eps,
        estimated_num_ppn,
        name
    );
    check!(ucp_lib_attr_t, max_thread_level);
    check!(
        ucp_context_attr_t,
        request_size,
        thread_mode,
        memory_types,
        name
    );
    check!(
        ucp_worker_params_t,
        thread_mode,
        cpu_mask,
        events,
        user_data,
        event_fd,
        flags,
        name,
        am_alignment,
        client_id
    );
    check!(
        ucp_worker_attr_t,
        thread_mode,
        address_flags,
        address,
        address_length,
        max_am_header,
        name,
        max_debug_string
    );
    check!(ucp_worker_address_attr_t, worker_uid);
    check!(
        ucp_ep_params_t,
        address,
        err_mode,
        err_handler,
        user_data,
        flags,
        sockaddr,
        conn_request,
        name,
        local_sockaddr
    );
    check!(ucp_ep_attr_t, name, local_sockaddr, remote_sockaddr);
    check!(
        ucp_listener_params_t,
        sockaddr,
        accept_handler,
        conn_handler
    );
    check!(ucp_listener_attr_t, sockaddr);
    check!(ucp_conn_request_attr_t, client_address, client_id);
    check!(
        ucp_mem_map_params_t,
        address,
        length,
        flags,
        prot,
        memory_type
    );
    check!(ucp_mem_attr_t, address, length, mem_type);
    check!(ucp_mem_advise_params_t, address, length, advice);
    check!(ucp_dt_iov_t, buffer, length);
    check!(
        ucp_generic_dt_ops_t,
        start_pack,
        start_unpack,
        packed_size,
        pack,
        unpack,
        finish
    );
    check!(ucp_tag_recv_info_t, sender_tag, length);
    check!(
        ucp_request_param_t,
        op_attr_mask,
        flags,
        request,
        cb,
        datatype,
        user_data,
        reply_buffer,
        memory_type,
        recv_info,
        memh
    );
    check!(
        ucp_request_attr_t,
        debug_string,
        debug_string_size,
        status,
        mem_type
    );
    check!(ucp_am_handler_param_t, id, flags, cb, arg);
    check!(ucp_am_recv_param_t, recv_attr, reply_ep);
    check!(ucp_stream_poll_ep_t, user_data, flags, reserved);
    check!(ucs_cpu_set_t);
    check!(ucs_sock_addr_t, addr, addrlen);
}
