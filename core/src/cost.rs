//! Time model (placeholder, being written).
