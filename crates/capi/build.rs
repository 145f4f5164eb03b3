//! Link settings of the C library: its SONAME is `libucp.so.0` (the file cargo writes is
//! `librucx_capi.so`, because a library target named `ucp` would collide with the `ucp`
//! crate; `scripts/install` and the tests copy or link it under UCX's names), and a
//! version script exports exactly the API (`exports.map`).

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=exports.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libucp.so.0");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/exports.map");
}
