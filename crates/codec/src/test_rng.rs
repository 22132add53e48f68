//! A seeded xorshift generator for unit tests that need arbitrary but repeatable data.

/// The generator's successive states after seeding with `seed` (a zero seed is made odd).
pub(crate) fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed | 1;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}
