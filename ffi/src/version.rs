//! ABI and library versions.

use core::ffi::{CStr, c_char};

use crate::boundary::guard;

/// The C ABI version this header describes.
///
/// A single integer, independent of the crate's semver, increased by one whenever a change
/// could break a program compiled against an older header: a changed or removed function, a
/// changed layout of a frozen struct, a renumbered status or constant. Additions (new
/// functions, new statuses, fields appended to a `struct_size` struct) do not change it.
/// Compare it with `skrull_abi_version()` at start-up to detect a header/library mismatch.
pub const SKRULL_ABI_VERSION: u32 = 1;

/// The crate version, NUL-terminated.
const VERSION: &CStr =
    match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(v) => v,
        Err(_) => c"unknown",
    };

/// Returns the ABI version of the linked library; a program should check that it equals the
/// `SKRULL_ABI_VERSION` it was compiled with.
///
/// # Safety
/// None: safe to call from any thread at any time.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_abi_version() -> u32 {
    guard(|| SKRULL_ABI_VERSION)
}

/// Returns the library's version as a static NUL-terminated string (for example `"0.1.0"`),
/// for logs. Never NULL; must not be freed.
///
/// # Safety
/// None: safe to call from any thread at any time.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_version() -> *const c_char {
    guard(|| VERSION.as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_match_the_crate() {
        // SAFETY: no preconditions.
        assert_eq!(unsafe { skrull_abi_version() }, SKRULL_ABI_VERSION);
        // SAFETY: the pointer is a static NUL-terminated string.
        let v = unsafe { CStr::from_ptr(skrull_version()) };
        assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    }
}
