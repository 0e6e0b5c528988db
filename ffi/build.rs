//! Build script of skrull-ffi: on Linux, gives `libskrull.so` the SONAME
//! `libskrull.so.<ABI version>`, so that programs record the ABI they were linked against and
//! a distribution can install a later ABI's library beside this one.
//!
//! The ABI version is read from `SKRULL_ABI_VERSION` in `src/version.rs` (the one definition;
//! `ffi/tests/soname.rs` checks that the SONAME in the built library agrees with it).

use std::env;
use std::fs;

/// The value of `pub const SKRULL_ABI_VERSION: u32 = N;` in `src/version.rs`.
fn abi_version() -> Result<u32, String> {
    let src = fs::read_to_string("src/version.rs").map_err(|e| format!("src/version.rs: {e}"))?;
    let prefix = "pub const SKRULL_ABI_VERSION: u32 = ";
    let line = src
        .lines()
        .find_map(|l| l.strip_prefix(prefix))
        .ok_or_else(|| format!("src/version.rs has no line starting with `{prefix}`"))?;
    let digits = line
        .strip_suffix(';')
        .ok_or_else(|| format!("SKRULL_ABI_VERSION: `{line}` does not end with `;`"))?;
    digits
        .parse()
        .map_err(|e| format!("SKRULL_ABI_VERSION: `{digits}` is not an integer: {e}"))
}

fn main() -> Result<(), String> {
    println!("cargo::rerun-if-changed=src/version.rs");
    println!("cargo::rerun-if-changed=build.rs");
    let abi = abi_version()?;
    // The target's OS, not the host's (the script runs on the host).
    if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        // Only the cdylib gets it; rustc links through `cc`, hence `-Wl,`.
        println!("cargo::rustc-cdylib-link-arg=-Wl,-soname,libskrull.so.{abi}");
    }
    Ok(())
}
