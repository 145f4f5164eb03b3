//! Link settings of libucc: SONAME `libucc.so.1` and a version script (`exports.map`)
//! that exports exactly the UCC API rucx implements.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=exports.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libucc.so.1");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/exports.map");
}
