//! Evaluator (placeholder, being written).
