//! Keys and hashes: the FNV-1a variant every Graph key and image hash is computed with.
//!
//! Its own file because it is the one part of `graph` both the recorder (naming bodies) and
//! the device (checking images) use without building or reading an image; it depends on
//! nothing else here but the header's `content_hash` offset.

use super::records::GraphDefinitionHeader;
use core::mem::offset_of;

/// The offset basis every key and image hash starts from, as the reference spells it. This is
/// one digit short of the published FNV-1a basis (14695981039346656037); it is kept as
/// specified so keys and image hashes agree with the reference's.
pub const FNV_OFFSET_BASIS: u64 = 1_469_598_103_934_665_603;
/// FNV-1a 64-bit prime.
pub const FNV_PRIME: u64 = 1_099_511_628_211;

/// Byte-wise FNV-1a of `bytes` from the reference's basis, [`FNV_OFFSET_BASIS`]: the hash
/// every Graph key starts as.
///
/// Not the standard FNV-1a: the published basis is 14695981039346656037 (`0xcbf29ce484222325`,
/// which the host's L3 callable digest uses), and the reference dropped its last digit. Keys
/// must equal the reference's, so this keeps the reference's basis; only the basis differs,
/// the prime and the mixing step are FNV-1a's.
const fn fnv1a_reference_basis(bytes: &[u8]) -> u64 {
    fnv1a_continue(FNV_OFFSET_BASIS, bytes)
}

/// Mixes `bytes` into a running FNV-1a state, one byte per multiply by [`FNV_PRIME`]. The
/// step is the standard one; what the state started from is the caller's (here always
/// [`FNV_OFFSET_BASIS`], through [`fnv1a_reference_basis`] or [`GraphHasher::new`]).
const fn fnv1a_continue(mut hash: u64, bytes: &[u8]) -> u64 {
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(FNV_PRIME);
        i += 1;
    }
    hash
}

/// The key of a Graph named by a string: byte-wise FNV-1a of `name`, from the reference's
/// basis ([`FNV_OFFSET_BASIS`]).
///
/// `const`, so a key can be a constant: `const K: u64 = graph_key(b"attention");`.
pub const fn graph_key(name: &[u8]) -> u64 {
    fnv1a_reference_basis(name)
}

/// The Graph key the runtime uses: byte-wise FNV-1a over `callable_hash` then `key`, each as
/// eight little-endian bytes. `callable_hash` identifies the orchestration entry; it is
/// per-process and never persisted.
pub const fn full_key(callable_hash: u64, key: u64) -> u64 {
    fnv1a_continue(
        fnv1a_reference_basis(&callable_hash.to_le_bytes()),
        &key.to_le_bytes(),
    )
}

/// A construction parameter hashed into a key by value: changing it selects another
/// Definition; the value is never patched into an existing one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ConfigValue {
    /// A `bool` (category 1, width 1, hashed as 0 or 1).
    Bool(bool),
    /// An `i8` (category 2, width 1).
    I8(i8),
    /// An `i16` (category 2, width 2).
    I16(i16),
    /// An `i32` (category 2, width 4).
    I32(i32),
    /// An `i64` (category 2, width 8).
    I64(i64),
    /// A `u8` (category 3, width 1).
    U8(u8),
    /// A `u16` (category 3, width 2).
    U16(u16),
    /// A `u32` (category 3, width 4).
    U32(u32),
    /// A `u64` (category 3, width 8).
    U64(u64),
    /// An `f32` (category 4, width 4, hashed as its bits).
    F32(f32),
    /// An `f64` (category 4, width 8, hashed as its bits).
    F64(f64),
}

impl ConfigValue {
    /// Category byte of `bool` values.
    pub const CATEGORY_BOOL: u8 = 1;
    /// Category byte of signed integers.
    pub const CATEGORY_SIGNED: u8 = 2;
    /// Category byte of unsigned integers.
    pub const CATEGORY_UNSIGNED: u8 = 3;
    /// Category byte of floating-point values.
    pub const CATEGORY_FLOAT: u8 = 4;

    /// The category byte hashed before the value.
    pub const fn category(self) -> u8 {
        match self {
            Self::Bool(_) => Self::CATEGORY_BOOL,
            Self::I8(_) | Self::I16(_) | Self::I32(_) | Self::I64(_) => Self::CATEGORY_SIGNED,
            Self::U8(_) | Self::U16(_) | Self::U32(_) | Self::U64(_) => Self::CATEGORY_UNSIGNED,
            Self::F32(_) | Self::F64(_) => Self::CATEGORY_FLOAT,
        }
    }

    /// The width byte: the value's size in bytes.
    pub const fn width(self) -> u8 {
        match self {
            Self::Bool(_) | Self::I8(_) | Self::U8(_) => 1,
            Self::I16(_) | Self::U16(_) => 2,
            Self::I32(_) | Self::U32(_) | Self::F32(_) => 4,
            Self::I64(_) | Self::U64(_) | Self::F64(_) => 8,
        }
    }

    /// The value's little-endian bytes, in the first [`Self::width`] bytes.
    fn le_bytes(self) -> [u8; 8] {
        let mut out = [0u8; 8];
        match self {
            Self::Bool(v) => out[0] = v as u8,
            Self::I8(v) => out[..1].copy_from_slice(&v.to_le_bytes()),
            Self::I16(v) => out[..2].copy_from_slice(&v.to_le_bytes()),
            Self::I32(v) => out[..4].copy_from_slice(&v.to_le_bytes()),
            Self::I64(v) => out.copy_from_slice(&v.to_le_bytes()),
            Self::U8(v) => out[0] = v,
            Self::U16(v) => out[..2].copy_from_slice(&v.to_le_bytes()),
            Self::U32(v) => out[..4].copy_from_slice(&v.to_le_bytes()),
            Self::U64(v) => out.copy_from_slice(&v.to_le_bytes()),
            Self::F32(v) => out[..4].copy_from_slice(&v.to_bits().to_le_bytes()),
            Self::F64(v) => out.copy_from_slice(&v.to_bits().to_le_bytes()),
        }
        out
    }
}

macro_rules! config_from {
    ($($t:ty => $v:ident),* $(,)?) => {$(
        impl From<$t> for ConfigValue {
            fn from(v: $t) -> Self {
                Self::$v(v)
            }
        }
    )*};
}
config_from!(bool => Bool, i8 => I8, i16 => I16, i32 => I32, i64 => I64, u8 => U8, u16 => U16,
    u32 => U32, u64 => U64, f32 => F32, f64 => F64);

/// A key from an id and construction parameters: byte-wise FNV-1a over `id` (eight
/// little-endian bytes), the number of values as a little-endian `u32`, then per value its
/// category byte, its width byte and its little-endian bytes.
///
/// The count is hashed as `cfg.len() as u32`; a slice of more than `u32::MAX` values is not a
/// key anyone records.
pub fn make_key(id: u64, cfg: &[ConfigValue]) -> u64 {
    let mut h = fnv1a_reference_basis(&id.to_le_bytes());
    h = fnv1a_continue(h, &(cfg.len() as u32).to_le_bytes());
    for v in cfg {
        let width = v.width();
        h = fnv1a_continue(h, &[v.category(), width]);
        h = fnv1a_continue(h, &v.le_bytes()[..width as usize]);
    }
    h
}

/// The image hash, in streaming form: an FNV-1a variant that mixes one little-endian `u64`
/// word per multiply, then the bytes left over one at a time.
///
/// **Chunking rule.** [`GraphHasher::update`] does not carry bytes between calls: each call
/// hashes its own whole words, then its own tail byte-wise. Feeding a buffer in pieces
/// therefore equals one [`graph_hash_bytes`] call over the whole buffer exactly when every
/// piece except the last has a length that is a multiple of 8 (every split point sits on an
/// 8-byte boundary of the whole). Other splits give a different, equally deterministic hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphHasher {
    state: u64,
}

impl Default for GraphHasher {
    fn default() -> Self {
        Self::new()
    }
}

impl GraphHasher {
    /// A hasher that has seen nothing.
    pub const fn new() -> Self {
        Self {
            state: FNV_OFFSET_BASIS,
        }
    }

    /// Hashes `bytes`: whole 8-byte words first, then the tail byte by byte. See the type's
    /// chunking rule.
    pub fn update(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        let mut h = self.state;
        for w in &mut words {
            let mut word = [0u8; 8];
            word.copy_from_slice(w);
            h ^= u64::from_le_bytes(word);
            h = h.wrapping_mul(FNV_PRIME);
        }
        self.state = fnv1a_continue(h, words.remainder());
    }

    /// The hash of everything fed so far.
    pub const fn finish(&self) -> u64 {
        self.state
    }
}

/// The image hash of `bytes` in one call (see [`GraphHasher`]).
pub fn graph_hash_bytes(bytes: &[u8]) -> u64 {
    let mut h = GraphHasher::new();
    h.update(bytes);
    h.finish()
}

/// The content hash of a Definition image: [`graph_hash_bytes`] of the image with its
/// `content_hash` field (bytes 8..16) read as zero, whatever it holds. Both split points are
/// multiples of 8, so this streams without copying the image.
pub fn definition_content_hash(image: &[u8]) -> u64 {
    const START: usize = offset_of!(GraphDefinitionHeader, content_hash);
    const END: usize = START + 8;
    let mut h = GraphHasher::new();
    h.update(&image[..image.len().min(START)]);
    if image.len() > START {
        h.update(&[0u8; 8][..image.len().min(END) - START]);
    }
    if image.len() > END {
        h.update(&image[END..]);
    }
    h.finish()
}
