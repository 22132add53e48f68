//! Damage for the snapshot-file tests of this crate and of amrzip-zarrs (included by `#[path]`).

/// `good` cut short, with one bit flipped, or with eight bytes overwritten, by `round % 3`.
pub fn damage(good: &[u8], round: usize, rng: &mut fastrand::Rng) -> Vec<u8> {
    let mut bad = good.to_vec();
    match round % 3 {
        0 => bad.truncate(rng.usize(..good.len())),
        1 => bad[rng.usize(..good.len())] ^= 1 << rng.u32(..8),
        _ => (0..8).for_each(|_| bad[rng.usize(..good.len())] = rng.u8(..)),
    }
    bad
}
