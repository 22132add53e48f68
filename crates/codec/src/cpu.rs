//! Hot loops compiled for the processor at hand. The library is built for baseline x86-64, so
//! one build runs anywhere; the functions made with [`fast_fn!`] are compiled a second time
//! with AVX2 and BMI2 (vectors twice as wide; shifts by a variable amount in one instruction,
//! which the Huffman coder makes for every symbol) and chosen at run time. Neither changes a
//! result: Rust never fuses a multiply and an add on its own.

/// Whether the CPU has AVX2 and BMI2 (detected once, then a cached load).
#[inline(always)]
pub fn avx2_bmi2() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("bmi2");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// `fast_fn!(vis fn name<T: Bound>(args) -> Ret => inner)` (the type parameter optional)
/// defines `name`, which calls `inner` compiled with AVX2 and BMI2 where the CPU has them.
/// Only what is inlined into the feature-enabled copy gets the features, so `inner` must be
/// `#[inline(always)]` (a closure would not be inlined).
macro_rules! fast_fn {
    ($(#[$attr:meta])* $vis:vis fn $name:ident $(<$g:ident: $bound:path>)? ($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty => $inner:path) => {
        $(#[$attr])*
        $vis fn $name $(<$g: $bound>)? ($($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            if $crate::cpu::avx2_bmi2() {
                #[target_feature(enable = "avx2,bmi1,bmi2")]
                unsafe fn fast $(<$g: $bound>)? ($($arg: $ty),*) -> $ret {
                    $inner($($arg),*)
                }
                // Safety: the CPU has the features enabled.
                return unsafe { fast($($arg),*) };
            }
            $inner($($arg),*)
        }
    };
}
pub(crate) use fast_fn;

/// How many of `items` `pred` accepts, summed in 32-bit lanes block by block: a `usize` count
/// widens every comparison to 64 bits and takes four times the vector steps.
#[inline(always)]
pub fn count_where<T>(items: &[T], pred: impl Fn(&T) -> bool) -> usize {
    items.chunks(1 << 16).map(|c| c.iter().map(|x| pred(x) as u32).sum::<u32>() as usize).sum()
}
