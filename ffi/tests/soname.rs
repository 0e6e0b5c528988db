//! `libskrull.so` carries the SONAME `libskrull.so.<SKRULL_ABI_VERSION>` (set by `build.rs`,
//! Linux only), read here from the ELF file cargo built next to this test, with a small ELF
//! reader of our own (`tests/c/run.sh` checks the same with `readelf -d`).
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failure is a test failure

use std::path::PathBuf;

/// The shared library built with this test: cargo links it into `target/<profile>/deps/`,
/// next to the test executable (`cargo build` copies it one level up; `cargo test` does not).
fn cdylib() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().join("libskrull.so")
}

/// Reads fixed-width little- or big-endian integers out of an ELF image.
struct Elf<'a> {
    b: &'a [u8],
    wide: bool,
    big: bool,
}

impl Elf<'_> {
    fn uint(&self, at: usize, size: usize) -> u64 {
        let s = &self.b[at..at + size];
        let mut v = 0u64;
        for k in 0..size {
            let byte = if self.big { s[k] } else { s[size - 1 - k] };
            v = (v << 8) | u64::from(byte);
        }
        v
    }
    /// An address-sized field (`Elf32_Addr`/`Elf64_Addr`, `Off`, `Xword`).
    fn word(&self, at: usize) -> u64 {
        self.uint(at, if self.wide { 8 } else { 4 })
    }
    fn cstr(&self, at: usize) -> String {
        let end = self.b[at..].iter().position(|&c| c == 0).unwrap();
        String::from_utf8(self.b[at..at + end].to_vec()).unwrap()
    }
}

/// Every `DT_SONAME` string of an ELF shared object (from its `SHT_DYNAMIC` section).
fn sonames(bytes: &[u8]) -> Vec<String> {
    assert_eq!(&bytes[..4], b"\x7fELF", "not an ELF file");
    let e = Elf {
        b: bytes,
        wide: bytes[4] == 2,
        big: bytes[5] == 2,
    };
    let (w, half) = (if e.wide { 8 } else { 4 }, 2);
    // e_shoff follows e_ident (16), e_type, e_machine (2 each), e_version (4), e_entry, e_phoff.
    let shoff = e.word(16 + 2 * half + 4 + 2 * w) as usize;
    // e_shentsize, e_shnum after e_flags (4), e_ehsize, e_phentsize, e_phnum (2 each).
    let tail = 16 + 2 * half + 4 + 3 * w + 4;
    let shentsize = e.uint(tail + 3 * half, 2) as usize;
    let shnum = e.uint(tail + 4 * half, 2) as usize;
    // Section header: sh_name (4), sh_type (4), sh_flags (w), sh_addr (w), sh_offset (w),
    // sh_size (w), sh_link (4).
    let section = |i: usize| {
        let h = shoff + i * shentsize;
        let ty = e.uint(h + 4, 4);
        let offset = e.word(h + 8 + 2 * w) as usize;
        let size = e.word(h + 8 + 3 * w) as usize;
        let link = e.uint(h + 8 + 4 * w, 4) as usize;
        (ty, offset, size, link)
    };
    const SHT_DYNAMIC: u64 = 6;
    const DT_NULL: u64 = 0;
    const DT_SONAME: u64 = 14;
    let mut out = Vec::new();
    for i in 0..shnum {
        let (ty, offset, size, link) = section(i);
        if ty != SHT_DYNAMIC {
            continue;
        }
        let strtab = section(link).1;
        for entry in (offset..offset + size).step_by(2 * w) {
            match e.word(entry) {
                DT_NULL => break,
                DT_SONAME => out.push(e.cstr(strtab + e.word(entry + w) as usize)),
                _ => {}
            }
        }
    }
    out
}

/// Issue from an outside harness: `libskrull.so` had no SONAME, so a distribution could not
/// ship it beside a library of a newer ABI. It now names the ABI version it implements.
#[test]
#[cfg_attr(miri, ignore = "reads a file cargo built")]
fn cdylib_soname_is_derived_from_the_abi_version() {
    let path = cdylib();
    let bytes = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (cargo builds it with the tests)", path.display()));
    let want = format!("libskrull.so.{}", skrull::SKRULL_ABI_VERSION);
    assert_eq!(sonames(&bytes), [want], "{}", path.display());
}

/// The ELF reader finds what it should, so the test above cannot pass by reading nothing.
#[test]
#[cfg_attr(miri, ignore = "reads files")]
fn elf_reader_finds_no_soname_in_a_program_and_one_in_a_library() {
    let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    assert_eq!(sonames(&exe), Vec::<String>::new());
    let libc = [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/lib64/libc.so.6",
        "/lib/libc.so.6",
    ]
    .iter()
    .find_map(|p| std::fs::read(p).ok());
    if let Some(libc) = libc {
        assert_eq!(sonames(&libc), ["libc.so.6"]);
    }
}
