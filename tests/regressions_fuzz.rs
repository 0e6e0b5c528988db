//! Fuzz regressions: every input that ever crashed a fuzz target (`fuzz/`) replays here as a
//! named test, through the same harness (`fuzz/fuzz_targets/harness.rs`), so the bug stays
//! fixed without nightly or cargo-fuzz. The committed seed corpus replays too.
#![allow(clippy::unwrap_used)] // test helpers: a failure is a test failure

#[path = "../fuzz/fuzz_targets/check.rs"]
mod check;
#[path = "../fuzz/fuzz_targets/harness.rs"]
mod harness;

use std::path::Path;

/// Every committed seed (`fuzz/corpus/<target>/seed-*`) passes its target's harness.
#[test]
#[cfg_attr(miri, ignore)]
fn committed_seed_corpus_replays_clean() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
    let mut replayed = 0;
    for target in ["c_abi", "rust_api"] {
        let mut entries: Vec<_> = std::fs::read_dir(root.join(target))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("seed-"))
            })
            .collect();
        entries.sort();
        for p in entries {
            let data = std::fs::read(&p).unwrap();
            match target {
                "c_abi" => {
                    let _ = harness::c_abi(&data);
                }
                _ => harness::rust_api(&data),
            }
            replayed += 1;
        }
    }
    assert!(
        replayed >= 10,
        "only {replayed} seeds found under {}",
        root.display()
    );
}
