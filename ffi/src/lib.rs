//! C ABI for skrull (being written).
