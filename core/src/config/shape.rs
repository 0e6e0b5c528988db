//! The transformer shape FLOPs and times are counted for, with its presets.

use crate::config::limits::{MAX_FFN, MAX_HIDDEN, MAX_LAYERS, MAX_VOCAB};
use crate::error::{Error, ShapeField};

/// The transformer shape used to count FLOPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelShape {
    /// Hidden size `h` (equal to query heads x head dim for the supported models).
    pub hidden: u32,
    /// K/V hidden size `h_kv` = KV heads x head dim.
    pub kv_hidden: u32,
    /// FFN (intermediate) width.
    pub ffn: u32,
    /// Number of transformer layers.
    pub layers: u32,
    /// Vocabulary size (0: do not count the LM head).
    pub vocab: u32,
    /// Whether the FFN is gated (SwiGLU: three matrices instead of two).
    pub swiglu: bool,
}

impl ModelShape {
    /// Qwen2.5-0.5B: h 896, 24 layers, 14 Q / 2 KV heads of 64, SwiGLU FFN 4864, vocab 151,936.
    pub const QWEN2_5_0_5B: ModelShape = ModelShape {
        hidden: 896,
        kv_hidden: 128,
        ffn: 4864,
        layers: 24,
        vocab: 151_936,
        swiglu: true,
    };
    /// Qwen2.5-7B: h 3584, 28 layers, 28 Q / 4 KV heads of 128, SwiGLU FFN 18944, vocab 152,064.
    pub const QWEN2_5_7B: ModelShape = ModelShape {
        hidden: 3584,
        kv_hidden: 512,
        ffn: 18_944,
        layers: 28,
        vocab: 152_064,
        swiglu: true,
    };

    /// Looks up a preset by name (`qwen2.5-0.5b`, `qwen2.5-7b`).
    pub fn preset(name: &str) -> Option<ModelShape> {
        match name {
            "qwen2.5-0.5b" => Some(Self::QWEN2_5_0_5B),
            "qwen2.5-7b" => Some(Self::QWEN2_5_7B),
            _ => None,
        }
    }

    /// Checks every field against its limit.
    ///
    /// # Errors
    /// [`Error::InvalidModel`] naming the first field out of range.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |field, value| Err(Error::InvalidModel { field, value });
        if self.hidden == 0 || self.hidden > MAX_HIDDEN {
            return bad(ShapeField::Hidden, self.hidden);
        }
        if self.kv_hidden == 0 || self.kv_hidden > self.hidden {
            return bad(ShapeField::KvHidden, self.kv_hidden);
        }
        if self.ffn == 0 || self.ffn > MAX_FFN {
            return bad(ShapeField::Ffn, self.ffn);
        }
        if self.layers == 0 || self.layers > MAX_LAYERS {
            return bad(ShapeField::Layers, self.layers);
        }
        if self.vocab > MAX_VOCAB {
            return bad(ShapeField::Vocab, self.vocab);
        }
        Ok(())
    }
}
