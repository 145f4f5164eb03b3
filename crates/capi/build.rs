//! Link settings of the C library: its SONAME is `libucp.so.0` (the file cargo writes is
//! `librucx_capi.so`, because a library target named `ucp` would collide with the `ucp`
//! crate; `scripts/install` and the tests copy or link it under UCX's names), and a
//! version script exports exactly the API (`exports.map`).
//!
//! It also compiles `csrc/ucs_varargs.c`: the libucs functions with variable argument
//! lists and the data objects programs' inline code reads, which stable Rust cannot
//! define (see `src/ucs_util.rs`). The archive is linked whole, so every one of its
//! exported symbols is in the library whether or not Rust code refers to it.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=exports.map");
    println!("cargo:rerun-if-changed=csrc/ucs_varargs.c");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libucp.so.0");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/exports.map");
    cc::Build::new()
        .file("csrc/ucs_varargs.c")
        .pic(true)
        .std("c11")
        .warnings(true)
        .extra_warnings(true)
        .flag_if_supported("-Wno-unused-parameter")
        .link_lib_modifier("+whole-archive")
        .compile("rucx_ucs_varargs");
}
