//! Per-GPU execution layout (placeholder, being written).
