//! The floating-point element types the codec handles, behind one trait so every stage is
//! written once and monomorphised for f32 and f64.

/// Element type tag as stored in stream headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DType {
    F32 = 0,
    F64 = 1,
}

impl DType {
    pub fn from_code(code: u8) -> Option<DType> {
        match code {
            0 => Some(DType::F32),
            1 => Some(DType::F64),
            _ => None,
        }
    }
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F64 => 8,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F64 => "float64",
        }
    }
}

pub trait Element: Copy + Default + Send + Sync + PartialOrd + 'static {
    const DTYPE: DType;
    const BYTES: usize;
    fn to_f64(self) -> f64;
    /// Rounds to the nearest representable value (`as` semantics).
    fn from_f64(v: f64) -> Self;
    fn is_finite(self) -> bool;
    fn write_le(self, out: &mut Vec<u8>);
    /// Reads one value from exactly `Self::BYTES` little-endian bytes.
    fn read_le(bytes: &[u8]) -> Self;
    /// Bit pattern, for exact comparisons that treat NaN payloads as equal to themselves.
    fn to_bits_u64(self) -> u64;
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    const BYTES: usize = 4;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn is_finite(self) -> bool {
        f32::is_finite(self)
    }
    fn write_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn read_le(bytes: &[u8]) -> Self {
        f32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"))
    }
    fn to_bits_u64(self) -> u64 {
        self.to_bits() as u64
    }
}

impl Element for f64 {
    const DTYPE: DType = DType::F64;
    const BYTES: usize = 8;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v
    }
    #[inline(always)]
    fn is_finite(self) -> bool {
        f64::is_finite(self)
    }
    fn write_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn read_le(bytes: &[u8]) -> Self {
        f64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"))
    }
    fn to_bits_u64(self) -> u64 {
        self.to_bits()
    }
}
