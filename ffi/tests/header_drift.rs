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

/// The header's option constants spell the core's option names: `SKRULL_<KIND>_<NAME>` is the
/// position of `name()` in the enum's `ALL` (so the Python binding, whose option names are
/// checked against these constants, uses the core's vocabulary).
#[test]
fn option_constants_spell_the_core_names() {
    use skrull_core::config::cost::Overlap;
    use skrull_core::{FlopsFormula, Policy, ShardPadding, Synchronisation, Victim};
    let header = include_str!("../../include/skrull.h");
    let check = |kind: &str, names: &[&str]| {
        for (i, name) in names.iter().enumerate() {
            let define = format!(
                "#define SKRULL_{kind}_{} {i}\n",
                name.to_uppercase().replace('-', "_")
            );
            assert!(header.contains(&define), "missing {define:?}");
        }
        let count = header.matches(&format!("#define SKRULL_{kind}_")).count();
        assert_eq!(count, names.len(), "SKRULL_{kind}_* constants");
    };
    check("POLICY", &Policy::ALL.map(Policy::name));
    check("VICTIM", &Victim::ALL.map(Victim::name));
    check("FLOPS", &FlopsFormula::ALL.map(FlopsFormula::name));
    check("SHARD_PADDING", &ShardPadding::ALL.map(ShardPadding::name));
    check("OVERLAP", &Overlap::ALL.map(Overlap::name));
    check("SYNC", &Synchronisation::ALL.map(Synchronisation::name));
}
