//! Link flags for the `dsh` executable.
//!
//! The executable is position-independent, so the dynamic loader patches every absolute
//! address in it at each start: some 76,000 relocations. Stored the classic way (24 bytes
//! each) that table is 1.8 MB the loader reads through on every start, a cost each bash step
//! pays again when the sandbox runs its launcher from this binary. Packed relative
//! relocations (DT_RELR) store the same table in a few kilobytes. Only glibc 2.36 and later
//! understand them, so the flag is passed only when the C library being linked against
//! announces support (its `GLIBC_ABI_DT_RELR` version) and the target is GNU/Linux.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let target = std::env::var("TARGET").unwrap_or_default();
    let host = std::env::var("HOST").unwrap_or_default();
    if target != host || !target.ends_with("-linux-gnu") {
        return;
    }
    let arch = target.split('-').next().unwrap_or_default();
    let candidates = [
        format!("/lib/{arch}-linux-gnu/libc.so.6"),
        format!("/usr/lib/{arch}-linux-gnu/libc.so.6"),
        "/lib64/libc.so.6".to_string(),
        "/usr/lib64/libc.so.6".to_string(),
    ];
    let supports_relr = candidates.iter().any(|path| {
        std::fs::read(path).is_ok_and(|bytes| {
            bytes
                .windows(b"GLIBC_ABI_DT_RELR".len())
                .any(|w| w == b"GLIBC_ABI_DT_RELR")
        })
    });
    if supports_relr {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
