//! `skrull_model_shape`: the transformer shape FLOPs are counted for, in its C form.

use core::mem::size_of;

use skrull_core::ModelShape;

/// The transformer shape FLOPs are counted for (frozen layout, 24 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct skrull_model_shape {
    /// Hidden size `h` (query heads x head dim), 1..=65536.
    pub hidden: u32,
    /// K/V hidden size `h_kv` (KV heads x head dim), 1..=`hidden`.
    pub kv_hidden: u32,
    /// FFN (intermediate) width, 1..=262144.
    pub ffn: u32,
    /// Transformer layers, 1..=1024.
    pub layers: u32,
    /// Vocabulary size, 0..=4194304 (0: the LM head is not counted).
    pub vocab: u32,
    /// 1 for a gated (SwiGLU) FFN, 0 for a plain two-matrix FFN; other values are
    /// `SKRULL_STATUS_INVALID_ENUM`.
    pub swiglu: u32,
}

const _: () = assert!(size_of::<skrull_model_shape>() == 24);

impl skrull_model_shape {
    /// The C form of a core model shape.
    pub fn from_core(m: &ModelShape) -> Self {
        skrull_model_shape {
            hidden: m.hidden,
            kv_hidden: m.kv_hidden,
            ffn: m.ffn,
            layers: m.layers,
            vocab: m.vocab,
            swiglu: u32::from(m.swiglu),
        }
    }
}
