//! Fails when the committed `include/skrull.h` differs from what the pinned cbindgen generates
//! from `ffi/src` now. `SKRULL_BLESS=1 cargo test -p skrull-ffi --test header_drift` rewrites
//! the header instead.

use std::path::Path;

#[test]
#[cfg_attr(miri, ignore = "runs cargo metadata")]
fn committed_header_matches_cbindgen() {
    let ffi = Path::new(env!("CARGO_MANIFEST_DIR"));
    let header = ffi.join("../include/skrull.h");
    let config = cbindgen::Config::from_file(ffi.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_crate(ffi)
        .with_config(config)
        .generate()
        .expect("cbindgen failed to parse ffi/src");
    let mut fresh = Vec::new();
    bindings.write(&mut fresh);
    if std::env::var_os("SKRULL_BLESS").is_some() {
        std::fs::write(&header, &fresh).expect("write include/skrull.h");
        eprintln!("wrote {}", header.display());
        return;
    }
    let committed = std::fs::read(&header).unwrap_or_default();
    if committed != fresh {
        let first = committed
            .split(|&b| b == b'\n')
            .zip(fresh.split(|&b| b == b'\n'))
            .position(|(a, b)| a != b)
            .map_or_else(|| "length".to_string(), |l| format!("line {}", l + 1));
        panic!(
            "include/skrull.h is stale (first difference: {first}); rerun with SKRULL_BLESS=1 \
             cargo test -p skrull-ffi --test header_drift"
        );
    }
}
