//! The filter's `cd_values`: what the user sets (H5Pset_filter, h5py's compression_opts,
//! h5repack's UD=) and what `set_local` appends from the dataset. The layout is documented in
//! docs/hdf5.md; it is stored in every file that uses the filter, so it only ever grows under a
//! new layout version.

use amrzip_codec::{DType, ErrorBound, Preset};

/// Layout version, `cd_values[0]`.
pub const LAYOUT_VERSION: u32 = 1;
/// Values the user gives: version, mode, bound (low and high 32 bits of the f64), preset, valid.
/// The last two may be left out.
pub const USER_VALUES: usize = 6;
pub const MIN_USER_VALUES: usize = 4;
/// HDF5's largest dataspace rank (H5S_MAX_RANK).
pub const MAX_RANK: usize = 32;
/// `set_local` appends dtype, byte order, rank, then the chunk dims.
pub const LOCAL_HEADER: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UserParams {
    pub bound: ErrorBound,
    pub preset: Preset,
    /// Chunk extent along the slowest dimension that holds data; 0 = automatic (trailing
    /// all-zero slabs are dropped). See docs/hdf5.md, "Padded chunks".
    pub valid: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    pub user: UserParams,
    pub dtype: DType,
    pub big_endian: bool,
    /// Chunk dimensions, slowest first.
    pub dims: Vec<usize>,
}

fn bound_bits(bound: f64) -> (u32, u32) {
    let bits = bound.to_bits();
    (bits as u32, (bits >> 32) as u32)
}

/// Parses the user part of `cd` (anything past it, such as what an earlier `set_local` appended,
/// is ignored) and checks the bound the way `amrzip.compress` does.
pub fn parse_user(cd: &[u32]) -> Result<UserParams, String> {
    if cd.len() < MIN_USER_VALUES {
        return Err(format!(
            "expected at least {MIN_USER_VALUES} filter parameters (layout version, mode, bound low, bound high), got {}",
            cd.len()
        ));
    }
    if cd[0] != LAYOUT_VERSION {
        return Err(format!("unsupported parameter layout version {} (this plugin reads version {LAYOUT_VERSION})", cd[0]));
    }
    let value = f64::from_bits(u64::from(cd[2]) | (u64::from(cd[3]) << 32));
    // Smallest accepted value per mode, and whether it may be equal (as amrzip.codec._bound).
    let (bound, floor, inclusive) = match cd[1] {
        0 => (ErrorBound::Absolute(value), 0.0, true),
        1 => (ErrorBound::Relative(value), 0.0, true),
        2 => (ErrorBound::Ratio(value), 1.0, true),
        3 => (ErrorBound::Psnr(value), 0.0, false),
        m => return Err(format!("unknown bound mode {m} (0 = abs, 1 = rel, 2 = ratio, 3 = psnr)")),
    };
    if !value.is_finite() || value < floor || (value == floor && !inclusive) {
        return Err(format!("bound {value} out of range for mode {}", cd[1]));
    }
    let preset = match cd.get(4).copied().unwrap_or(0) {
        0 => Preset::Ratio,
        1 => Preset::Speed,
        p => return Err(format!("unknown preset {p} (0 = ratio, 1 = speed)")),
    };
    Ok(UserParams { bound, preset, valid: cd.get(5).copied().unwrap_or(0) })
}

/// The user part in its full form, as `set_local` stores it.
pub fn user_values(u: &UserParams) -> [u32; USER_VALUES] {
    let (mode, value) = match u.bound {
        ErrorBound::Absolute(v) => (0, v),
        ErrorBound::Relative(v) => (1, v),
        ErrorBound::Ratio(v) => (2, v),
        ErrorBound::Psnr(v) => (3, v),
    };
    let (lo, hi) = bound_bits(value);
    let preset = match u.preset {
        Preset::Ratio => 0,
        Preset::Speed => 1,
    };
    [LAYOUT_VERSION, mode, lo, hi, preset, u.valid]
}

/// Builds the full `cd_values` from the user part and the dataset's type and chunk shape,
/// refusing what the filter cannot compress.
pub fn local_values(cd: &[u32], dtype: DType, big_endian: bool, dims: &[u64]) -> Result<Vec<u32>, String> {
    let user = parse_user(cd)?;
    if dims.is_empty() || dims.len() > MAX_RANK {
        return Err(format!("chunk rank {} is not in 1..={MAX_RANK}", dims.len()));
    }
    if let Some(d) = dims.iter().find(|&&d| d == 0 || d > u64::from(u32::MAX)) {
        return Err(format!("chunk dimension {d} is not in 1..=2^32-1"));
    }
    if u64::from(user.valid) > dims[0] {
        return Err(format!("valid extent {} exceeds the chunk's first dimension {}", user.valid, dims[0]));
    }
    let mut out = user_values(&user).to_vec();
    out.extend([dtype as u32, u32::from(big_endian), dims.len() as u32]);
    out.extend(dims.iter().map(|&d| d as u32));
    Ok(out)
}

/// Parses the full `cd_values` the filter function receives.
pub fn parse(cd: &[u32]) -> Result<Params, String> {
    let user = parse_user(cd)?;
    let local = cd.get(USER_VALUES..).unwrap_or(&[]);
    if local.len() < LOCAL_HEADER {
        return Err("filter parameters lack the dataset part that set_local adds".into());
    }
    let dtype =
        DType::from_code(u8::try_from(local[0]).unwrap_or(u8::MAX)).ok_or_else(|| format!("unknown element type code {}", local[0]))?;
    let big_endian = match local[1] {
        0 => false,
        1 => true,
        o => return Err(format!("unknown byte order code {o}")),
    };
    let rank = local[2] as usize;
    let dims = &local[LOCAL_HEADER..];
    if rank == 0 || rank > MAX_RANK || dims.len() != rank {
        return Err(format!("chunk rank {rank} does not match the {} dimensions given", dims.len()));
    }
    if dims.contains(&0) {
        return Err("chunk dimension 0".into());
    }
    if user.valid as usize > dims[0] as usize {
        return Err(format!("valid extent {} exceeds the chunk's first dimension {}", user.valid, dims[0]));
    }
    let dims: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
    dims.iter().try_fold(dtype.size(), |acc, &d| acc.checked_mul(d)).ok_or_else(|| format!("chunk {dims:?} overflows"))?;
    Ok(Params { user, dtype, big_endian, dims })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn abs_cd(v: f64) -> Vec<u32> {
        let (lo, hi) = bound_bits(v);
        vec![1, 0, lo, hi]
    }

    #[test]
    fn bound_halves_round_trip() {
        for v in [1e-3, 0.0, 1e-300, 123456.789, f64::MIN_POSITIVE] {
            let u = parse_user(&abs_cd(v)).unwrap();
            assert_eq!(u.bound, ErrorBound::Absolute(v));
            assert_eq!(u.preset, Preset::Ratio);
            assert_eq!(u.valid, 0);
            assert_eq!(parse_user(&user_values(&u)).unwrap(), u);
        }
    }

    #[test]
    fn user_part_defaults_and_modes() {
        let (lo, hi) = bound_bits(40.0);
        let u = parse_user(&[1, 3, lo, hi, 1, 7]).unwrap();
        assert_eq!(u, UserParams { bound: ErrorBound::Psnr(40.0), preset: Preset::Speed, valid: 7 });
        // A stored full list parses the same (set_local's part is ignored here).
        let full = local_values(&[1, 3, lo, hi, 1, 7], DType::F64, false, &[10, 20]).unwrap();
        assert_eq!(full, vec![1, 3, lo, hi, 1, 7, 1, 0, 2, 10, 20]);
        assert_eq!(parse_user(&full).unwrap(), u);
    }

    #[test]
    fn user_part_rejects() {
        let (lo, hi) = bound_bits(1e-3);
        assert!(parse_user(&[1, 0, lo]).unwrap_err().contains("at least 4"));
        assert!(parse_user(&[2, 0, lo, hi]).unwrap_err().contains("layout version"));
        assert!(parse_user(&[1, 4, lo, hi]).unwrap_err().contains("mode"));
        assert!(parse_user(&[1, 0, lo, hi, 2]).unwrap_err().contains("preset"));
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            assert!(parse_user(&abs_cd(bad)).is_err(), "{bad}");
        }
        let (lo, hi) = bound_bits(0.5);
        assert!(parse_user(&[1, 2, lo, hi]).is_err(), "ratio below 1");
        let (lo, hi) = bound_bits(0.0);
        assert!(parse_user(&[1, 3, lo, hi]).is_err(), "psnr 0");
    }

    #[test]
    fn full_list_round_trips_and_is_checked() {
        let cd = local_values(&abs_cd(0.5), DType::F32, true, &[4, 5, 6]).unwrap();
        let p = parse(&cd).unwrap();
        assert_eq!(p.dtype, DType::F32);
        assert!(p.big_endian);
        assert_eq!(p.dims, vec![4, 5, 6]);
        assert_eq!(p.user.bound, ErrorBound::Absolute(0.5));

        assert!(parse(&cd[..USER_VALUES]).is_err(), "set_local part missing");
        assert!(parse(&cd[..cd.len() - 1]).is_err(), "dims truncated");
        let mut bad = cd.clone();
        bad[USER_VALUES] = 9;
        assert!(parse(&bad).is_err(), "dtype code");
        let mut bad = cd.clone();
        bad[5] = 5;
        assert!(parse(&bad).is_err(), "valid beyond the chunk");
    }

    #[test]
    fn local_values_refuses_bad_chunks() {
        let cd = abs_cd(1.0);
        assert!(local_values(&cd, DType::F32, false, &[]).is_err());
        assert!(local_values(&cd, DType::F32, false, &[0, 3]).is_err());
        assert!(local_values(&cd, DType::F32, false, &[1 << 33]).is_err());
        let mut with_valid = user_values(&parse_user(&cd).unwrap());
        with_valid[5] = 11;
        assert!(local_values(&with_valid, DType::F32, false, &[10]).is_err());
        assert!(local_values(&with_valid, DType::F32, false, &[11]).is_ok());
        // Values beyond the user part (a copied full list) are replaced, not kept.
        let full = local_values(&cd, DType::F32, false, &[3, 3]).unwrap();
        assert_eq!(local_values(&full, DType::F64, false, &[8]).unwrap().len(), USER_VALUES + LOCAL_HEADER + 1);
    }
}
