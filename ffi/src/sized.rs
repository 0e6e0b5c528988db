//! Reading the caller's extensible structs: every parameter struct starts with `uint32_t
//! struct_size`, and these readers honour the size rules of `skrull_config`'s documentation
//! (the struct the rules are written for). A leaf: it knows statuses and nothing else.

use core::mem::{align_of, size_of};

use crate::status::skrull_status;

/// The largest `struct_size` accepted for an extensible struct (bytes past the fields this
/// library knows must be zero).
pub const SKRULL_MAX_STRUCT_SIZE: u32 = 4096;

/// Reads an extensible struct whose first field is `uint32_t struct_size`, honouring the
/// size rules in [`skrull_config`]'s documentation; fields the caller's version lacks keep
/// their value in `default`. The struct must be aligned for `T`.
///
/// # Errors
/// `NullArg`, `InvalidArg` (misaligned) or `BadStructSize`.
///
/// # Safety
/// Unless NULL, `ptr` must point to a readable object of at least 4 bytes whose first field
/// is its size in bytes, and the whole `struct_size` bytes must be readable.
pub(crate) unsafe fn read_sized<T: Copy>(
    ptr: *const T,
    sizes: &[usize],
    default: T,
) -> Result<T, skrull_status> {
    // SAFETY: forwarded caller contract.
    unsafe { read_sized_narrow(ptr, sizes, 0, default) }
}

/// The alignment a `struct_size` of `size` bytes needs: that of `uint32_t` when the struct ends
/// at or before `narrow` (every field there is a `uint32_t`), else that of `T`.
pub(crate) fn size_class_align<T>(size: usize, narrow: usize) -> usize {
    if size <= narrow {
        align_of::<u32>()
    } else {
        align_of::<T>()
    }
}

/// [`read_sized`] for a struct whose first `narrow` bytes are `uint32_t` fields only: a
/// `struct_size` of at most `narrow` bytes needs only 4-byte alignment (a version-1 struct of
/// `uint32_t` fields, which a program may place at any 4-byte boundary), a larger one
/// alignment for `T`. The checks, in order: NULL; not 4-byte aligned (`struct_size` cannot be
/// read); the size rules (`BadStructSize`); not aligned for the size's class (`InvalidArg`).
///
/// # Errors
/// `NullArg`, `InvalidArg` (misaligned) or `BadStructSize`.
///
/// # Safety
/// As [`read_sized`].
pub(crate) unsafe fn read_sized_narrow<T: Copy>(
    ptr: *const T,
    sizes: &[usize],
    narrow: usize,
    default: T,
) -> Result<T, skrull_status> {
    if ptr.is_null() {
        return Err(skrull_status::NullArg);
    }
    if !ptr.cast::<u32>().is_aligned() {
        return Err(skrull_status::InvalidArg);
    }
    // SAFETY: non-null, aligned for its leading u32 (checked), and the caller guarantees at
    // least the 4 bytes of `struct_size` are readable.
    let size = unsafe { ptr.cast::<u32>().read() };
    let v1_size = sizes.first().copied().unwrap_or(size_of::<T>());
    if size < v1_size as u32 || size > SKRULL_MAX_STRUCT_SIZE {
        return Err(skrull_status::BadStructSize);
    }
    let size = size as usize;
    let known = size_of::<T>();
    let bytes = ptr.cast::<u8>();
    if size > known {
        // SAFETY: the caller guarantees `struct_size` readable bytes; `known..size` is inside.
        let tail = unsafe { core::slice::from_raw_parts(bytes.add(known), size - known) };
        if tail.iter().any(|&b| b != 0) {
            return Err(skrull_status::BadStructSize);
        }
    } else if size < known && !sizes.contains(&size) {
        // A size that ends inside a field would read part of it (half a pointer, say).
        return Err(skrull_status::BadStructSize);
    }
    if !(ptr as usize).is_multiple_of(size_class_align::<T>(size, narrow)) {
        return Err(skrull_status::InvalidArg);
    }
    let mut out = default;
    // SAFETY: `min(size, known)` bytes are readable at `ptr` (caller contract) and writable
    // in `out`; the types are plain integers and pointers, so every byte pattern the caller
    // wrote is a valid value; the regions are distinct objects. The copy is bytewise, so it
    // needs no alignment of `ptr`.
    unsafe {
        core::ptr::copy_nonoverlapping(bytes, (&raw mut out).cast::<u8>(), size.min(known));
    }
    Ok(out)
}

/// Reads what it can of a parameter struct a call refused or has not checked yet, to learn
/// which buffers it lends: `None` when NULL, not 4-byte aligned or below version 1, otherwise
/// the fields that lie wholly inside `struct_size` (the largest of `sizes` that fits), the rest
/// as in `default`. Never an error: used only to keep the error details out of the caller's
/// buffers.
///
/// # Safety
/// As [`read_sized`].
pub(crate) unsafe fn read_lenient<T: Copy>(
    ptr: *const T,
    sizes: &[usize],
    default: T,
) -> Option<T> {
    if ptr.is_null() || !ptr.cast::<u32>().is_aligned() {
        return None;
    }
    // SAFETY: non-null, 4-byte aligned (checked); its first 4 bytes are readable (contract).
    let size = unsafe { ptr.cast::<u32>().read() } as usize;
    let size = size.min(size_of::<T>());
    let n = sizes
        .iter()
        .copied()
        .chain([size_of::<T>()])
        .filter(|&s| s <= size)
        .max()?;
    let mut out = default;
    // SAFETY: `n <= struct_size` bytes are readable at `ptr` (contract) and writable in `out`;
    // plain integers and pointers, bytewise copy; distinct objects.
    unsafe {
        core::ptr::copy_nonoverlapping(ptr.cast::<u8>(), (&raw mut out).cast::<u8>(), n);
    }
    Some(out)
}
