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
    startup_order(&target);
}

/// Lays out the release `dsh` with the functions a run executes side by side.
///
/// A headless answer runs some 3,000 of the binary's functions, spread over most of its
/// 25 MB of code; each first call faults in the 64 KB around it, so the run kept about 16 MB
/// of code resident. `startup.order` lists those functions (recorded by
/// `bench/startup-order.sh` with callgrind over the mock-LLM scenarios) and the linker
/// places them first: the same run then keeps about 4 MB. The list only orders code — a
/// name that no longer exists is skipped, a new function goes after the listed ones — so a
/// stale list costs memory, never correctness. Only rust-lld, the default linker of
/// x86_64-unknown-linux-gnu, takes the option; `DSH_SYMBOL_ORDER` names another list, or
/// turns this off when empty.
fn startup_order(target: &str) {
    println!("cargo:rerun-if-env-changed=DSH_SYMBOL_ORDER");
    println!("cargo:rerun-if-changed=startup.order");
    let release = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    if !release || target != "x86_64-unknown-linux-gnu" {
        return;
    }
    let order = match std::env::var("DSH_SYMBOL_ORDER") {
        Ok(path) if path.is_empty() => return,
        Ok(path) => std::path::PathBuf::from(path),
        Err(_) => {
            let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
            std::path::Path::new(&dir).join("startup.order")
        }
    };
    if order.is_file() {
        println!(
            "cargo:rustc-link-arg-bin=dsh=-Wl,--symbol-ordering-file={}",
            order.display()
        );
        println!("cargo:rustc-link-arg-bin=dsh=-Wl,--no-warn-symbol-ordering");
    }
}
