//! The C boundary: the panic guard every export runs inside, and the checks that turn raw
//! pointers from C into statuses before anything is read or written.
//!
//! With the `std` feature (the default) the guard catches a panic and turns it into
//! `SKRULL_STATUS_PANIC`. Without it (the `no_std` build) nothing can unwind: the guard just
//! runs the body, and a panic, which the design rules out, stops the program in the panic
//! handler: a trap instruction (feature `panic-handler`) or the program's own
//! `skrull_on_panic()` (feature `panic-extern`).

#[cfg(feature = "std")]
use core::ffi::c_char;
#[cfg(feature = "std")]
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::status::skrull_status;

/// The value an export returns when its body panicked.
#[cfg(feature = "std")]
pub(crate) trait PanicDefault {
    /// The documented fallback value.
    fn panic_default() -> Self;
}

#[cfg(feature = "std")]
impl PanicDefault for skrull_status {
    fn panic_default() -> Self {
        skrull_status::Panic
    }
}

#[cfg(feature = "std")]
impl PanicDefault for usize {
    fn panic_default() -> Self {
        0
    }
}

#[cfg(feature = "std")]
impl PanicDefault for u32 {
    fn panic_default() -> Self {
        0
    }
}

#[cfg(feature = "std")]
impl PanicDefault for *const c_char {
    fn panic_default() -> Self {
        skrull_status::Panic.message().as_ptr()
    }
}

/// Runs `f`, turning a panic into `T::panic_default()` so that no unwind crosses into C.
///
/// Every export's body runs inside exactly one call of this function. The library never sets
/// a panic hook (that would be global state), so a caught panic is still reported on stderr by
/// the default hook before it becomes a status. With `panic = "abort"` (not the default; see
/// `docs/c_api.md`) a panic aborts the process instead.
#[cfg(feature = "std")]
pub(crate) fn guard<T: PanicDefault>(f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| T::panic_default())
}

/// The `no_std` guard: runs `f`. Without the standard library there is no unwinding, so no
/// unwind can cross into C either: a panic ends in the panic handler, which never returns.
#[cfg(not(feature = "std"))]
pub(crate) fn guard<T>(f: impl FnOnce() -> T) -> T {
    f()
}

#[cfg(all(feature = "panic-handler", feature = "panic-extern"))]
compile_error!("features `panic-handler` and `panic-extern` are alternatives: enable one");

/// The panic handler of the `no_std` build with feature `panic-handler`: stops the program at
/// once with the CPU's trap instruction, as `core::intrinsics::abort` does (SIGILL in a hosted
/// process, a fault such as HardFault on bare metal). It prints nothing and touches no state.
/// A panic is a bug (the scheduler is written not to panic). A program with its own panic
/// routine builds with `panic-extern` instead (see `docs/c_api.md`).
#[cfg(all(not(feature = "std"), feature = "panic-handler", not(test)))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
    trap()
}

#[cfg(all(not(feature = "std"), feature = "panic-extern", not(test)))]
unsafe extern "C" {
    /// Defined by the program that links the library (feature `panic-extern`): its own panic
    /// or abort routine, `_Noreturn void skrull_on_panic(void)`. It must not return.
    safe fn skrull_on_panic() -> !;
}

/// The panic handler of the `no_std` build with feature `panic-extern`: hands over to the
/// program's `skrull_on_panic()` (for example a kernel's panic routine or a firmware's fault
/// handler), which must not return.
#[cfg(all(not(feature = "std"), feature = "panic-extern", not(test)))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
    skrull_on_panic()
}

/// The unwinding personality routine that the precompiled `core` of a hosted target (built with
/// `panic = "unwind"`) refers to from its unwind tables. Nothing in this library unwinds (it is
/// built with `panic = "abort"`, and it never calls back into foreign code), so it is never
/// called; it exists so that the `no_std` static library links on such targets without the
/// standard library. Bare-metal targets (`target_os = "none"`) ship a `core` that needs none.
#[cfg(all(
    not(feature = "std"),
    any(feature = "panic-handler", feature = "panic-extern"),
    not(test),
    not(target_os = "none")
))]
#[unsafe(no_mangle)]
extern "C" fn rust_eh_personality() -> ! {
    trap()
}

/// Executes an instruction that is defined to fault, or spins where there is none.
#[cfg(all(
    not(feature = "std"),
    not(test),
    any(
        feature = "panic-handler",
        all(feature = "panic-extern", not(target_os = "none"))
    )
))]
fn trap() -> ! {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    // SAFETY: `ud2` raises an invalid-opcode exception; it reads and writes no memory.
    unsafe {
        core::arch::asm!("ud2", options(noreturn, nomem, nostack))
    }
    #[cfg(any(target_arch = "arm", target_arch = "aarch64"))]
    // SAFETY: `udf #0` is permanently undefined (ARM, Thumb and A64); it touches no memory.
    unsafe {
        core::arch::asm!("udf #0", options(noreturn, nomem, nostack))
    }
    #[cfg(any(target_arch = "riscv32", target_arch = "riscv64"))]
    // SAFETY: `unimp` is an illegal instruction by definition; it touches no memory.
    unsafe {
        core::arch::asm!("unimp", options(noreturn, nomem, nostack))
    }
    #[cfg(target_arch = "wasm32")]
    core::arch::wasm32::unreachable();
    #[cfg(not(any(
        target_arch = "x86",
        target_arch = "x86_64",
        target_arch = "arm",
        target_arch = "aarch64",
        target_arch = "riscv32",
        target_arch = "riscv64",
        target_arch = "wasm32"
    )))]
    loop {
        core::hint::spin_loop();
    }
}

/// An address range `[start, start + len)` in bytes, for overlap checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    start: usize,
    len: usize,
}

impl Span {
    /// The bytes of `count` elements of `T` at `ptr` (`None` on overflow).
    pub(crate) fn of<T>(ptr: *const T, count: usize) -> Option<Span> {
        let len = count.checked_mul(size_of::<T>())?;
        let start = ptr as usize;
        start.checked_add(len)?;
        Some(Span { start, len })
    }

    /// The bytes of `count` elements of `T` at `ptr`, cut at the end of the address space
    /// (empty for NULL): a conservative stand-in for a declared range that [`Span::of`] or
    /// [`declared`] refuses, for keeping the error details out of every buffer a caller lent.
    pub(crate) fn clamped<T>(ptr: *const T, count: usize) -> Span {
        let start = ptr as usize;
        let len = if ptr.is_null() {
            0
        } else {
            count.saturating_mul(size_of::<T>()).min(usize::MAX - start)
        };
        Span { start, len }
    }

    /// Whether two spans share a byte (empty spans share none).
    pub(crate) fn overlaps(self, other: Span) -> bool {
        self.len != 0
            && other.len != 0
            && self.start < other.start + other.len
            && other.start < self.start + self.len
    }
}

/// Whether any two of `spans` overlap.
pub(crate) fn any_overlap(spans: &[Span]) -> bool {
    spans
        .iter()
        .enumerate()
        .any(|(i, a)| spans.iter().skip(i + 1).any(|b| a.overlaps(*b)))
}

/// The declared byte range of a caller's buffer: `count` elements of `T` at `ptr`, the whole
/// capacity the caller lends, not only the part a call reads or writes.
///
/// # Errors
/// `NullArg` for NULL with a nonzero `count`; `InvalidArg` when `ptr` is misaligned for `T`,
/// or the range is larger than `isize::MAX` bytes or runs past the end of the address space.
pub(crate) fn declared<T>(ptr: *const T, count: usize) -> Result<Span, skrull_status> {
    if ptr.is_null() {
        if count != 0 {
            return Err(skrull_status::NullArg);
        }
    } else if !ptr.is_aligned() {
        return Err(skrull_status::InvalidArg);
    }
    match Span::of(ptr, count) {
        Some(span) if span.len <= isize::MAX as usize => Ok(span),
        _ => Err(skrull_status::InvalidArg),
    }
}

/// Checks a caller's `(ptr, len)` output buffer that must hold at least `needed` elements and
/// returns its declared range (all `len` elements: the overlap rule applies to what the caller
/// declared, not to what a call happens to write).
///
/// # Errors
/// As [`declared`], then `OutputTooSmall` when `len < needed`.
pub(crate) fn check_out<T>(ptr: *mut T, len: usize, needed: usize) -> Result<Span, skrull_status> {
    let span = declared(ptr.cast_const(), len)?;
    if len < needed {
        return Err(skrull_status::OutputTooSmall);
    }
    Ok(span)
}

/// Borrows the caller's `lengths` array.
///
/// # Errors
/// `NullArg` for NULL with `n > 0`, `InvalidArg` when misaligned or when the array would
/// wrap the address space.
///
/// # Safety
/// Unless NULL, `ptr` must point to `n` initialised `u32` that stay unchanged for `'a`.
pub(crate) unsafe fn lengths<'a>(ptr: *const u32, n: usize) -> Result<&'a [u32], skrull_status> {
    if n == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(skrull_status::NullArg);
    }
    if !ptr.is_aligned() || Span::of(ptr, n).is_none() || n > isize::MAX as usize / 4 {
        return Err(skrull_status::InvalidArg);
    }
    // SAFETY: non-null and aligned (checked), `n` readable initialised elements (caller
    // contract), total size below isize::MAX (checked).
    Ok(unsafe { core::slice::from_raw_parts(ptr, n) })
}

/// Raises a Rust panic inside the library's panic guard and returns what the guard made of it:
/// `SKRULL_STATUS_PANIC` in a library built with the standard library (the default).
///
/// Lets a C test suite or a trainer check, once at start-up, that panics inside skrull become
/// statuses instead of unwinding into C frames. The panic is raised without invoking the panic
/// hook, so nothing is printed. In a library that cannot catch a panic it raises nothing and
/// returns `SKRULL_STATUS_INTERNAL`: one built with `panic = "abort"`, and the `no_std` build
/// (`skrull-ffi` without its `std` feature), where a panic stops the program instead.
///
/// # Safety
/// None: safe to call from any thread at any time.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_panic_selftest() -> skrull_status {
    guard(|| {
        #[cfg(feature = "std")]
        if cfg!(panic = "unwind") {
            std::panic::resume_unwind(Box::new("skrull_panic_selftest"))
        }
        skrull_status::Internal
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(feature = "std")]
    fn guard_turns_a_panic_into_the_default() {
        // A real panic (its message goes to the captured test output).
        let v: Vec<u32> = Vec::new();
        let s: skrull_status = guard(|| skrull_status::from_u32(v[3]).unwrap_or(skrull_status::Ok));
        assert_eq!(s, skrull_status::Panic);
        assert_eq!(guard(|| skrull_status::Ok), skrull_status::Ok);
        let n: usize = guard(|| std::panic::resume_unwind(Box::new(())));
        assert_eq!(n, 0);
        // SAFETY: no preconditions.
        assert_eq!(unsafe { skrull_panic_selftest() }, skrull_status::Panic);
    }

    /// The `no_std` build has no guard: the self-test says so (INTERNAL) instead of panicking,
    /// and the guard passes every value through.
    #[test]
    #[cfg(not(feature = "std"))]
    fn without_std_the_selftest_reports_that_panics_are_not_caught() {
        // SAFETY: no preconditions.
        assert_eq!(unsafe { skrull_panic_selftest() }, skrull_status::Internal);
        assert_eq!(guard(|| skrull_status::Ok), skrull_status::Ok);
        assert_eq!(guard(|| 7usize), 7);
    }

    #[test]
    fn spans_overlap_only_when_sharing_a_byte() {
        let a = Span { start: 100, len: 8 };
        assert!(a.overlaps(Span { start: 107, len: 1 }));
        assert!(!a.overlaps(Span { start: 108, len: 8 }));
        assert!(!a.overlaps(Span { start: 92, len: 8 }));
        assert!(!a.overlaps(Span { start: 104, len: 0 }));
        assert!(any_overlap(&[
            a,
            Span { start: 0, len: 1 },
            Span { start: 90, len: 11 }
        ]));
        assert!(!any_overlap(&[a, Span { start: 0, len: 100 }]));
        assert_eq!(
            Span::of(core::ptr::without_provenance::<u32>(usize::MAX), 1),
            None
        );
    }

    #[test]
    fn output_checks_name_the_problem() {
        let mut buf = [0u32; 4];
        let p = buf.as_mut_ptr();
        assert!(check_out(p, 4, 4).is_ok());
        assert!(check_out(core::ptr::null_mut::<u32>(), 0, 0).is_ok());
        assert_eq!(
            check_out(core::ptr::null_mut::<u32>(), 4, 0),
            Err(skrull_status::NullArg)
        );
        assert_eq!(check_out(p, 3, 4), Err(skrull_status::OutputTooSmall));
        let odd = p.cast::<u8>().wrapping_add(1).cast::<u32>();
        assert_eq!(check_out(odd, 2, 1), Err(skrull_status::InvalidArg));
        // The returned range is the declared capacity, not the elements needed.
        assert_eq!(
            check_out(p, 4, 1),
            Span::of(p.cast_const(), 4).ok_or(skrull_status::Ok)
        );
        // A capacity whose bytes wrap the address space, or exceed isize::MAX, is malformed.
        assert_eq!(check_out(p, usize::MAX, 1), Err(skrull_status::InvalidArg));
        assert_eq!(
            check_out(p, isize::MAX as usize / 4 + 1, 1),
            Err(skrull_status::InvalidArg)
        );
        assert_eq!(
            declared(core::ptr::null::<u32>(), 1),
            Err(skrull_status::NullArg)
        );
    }
}
