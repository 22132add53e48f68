"""Property tests: whatever the array, bound and settings, decoded values stay within the bound and
NaN/Inf come back bit for bit."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import amrzip
from roundtrip import check

MAX_ELEMENTS = 4096  # per array; keeps this file, 3000+ examples, well under a minute

DTYPES = st.sampled_from([np.dtype(np.float32), np.dtype(np.float64)])


@st.composite
def shapes(draw):
    """Rank 1 to 4, every side 1..40, at most MAX_ELEMENTS in total."""
    shape, budget = [], MAX_ELEMENTS
    for _ in range(draw(st.integers(1, 4))):
        side = draw(st.integers(1, min(40, budget)))
        shape.append(side)
        budget //= side
    return tuple(shape)


def any_floats(dtype, **kwargs):
    return st.floats(width=8 * dtype.itemsize, **kwargs)


def arbitrary(dtype, shape):
    """Anything the dtype can hold: NaN, infinities, subnormals, huge and tiny values."""
    return hnp.arrays(dtype, shape, elements=any_floats(dtype))


def constant(dtype, shape):
    return any_floats(dtype).map(lambda v: np.full(shape, v, dtype=dtype))


def alternating(dtype, shape):
    """+-x in a checkerboard, around an offset."""
    sign = (-1.0) ** np.indices(shape).sum(axis=0)
    finite = any_floats(dtype, allow_nan=False, allow_infinity=False)

    def field(pair):
        with np.errstate(over="ignore"):  # overflow to inf at the extremes is a fine input too
            return (pair[0] + sign * pair[1]).astype(dtype)

    return st.tuples(finite, finite).map(field)


def _seeded(draw_field):
    """A strategy drawing a seed for numpy's generator, so large arrays cost one draw."""
    return st.integers(0, 2**32 - 1).map(lambda seed: draw_field(np.random.default_rng(seed)))


def smooth_plus_noise(dtype, shape):
    def field(rng):
        axes = np.meshgrid(*[np.linspace(0, rng.uniform(1, 20), n) for n in shape], indexing="ij", sparse=True)
        waves = sum((np.sin(a + rng.uniform(0, 6)) for a in axes), np.zeros(shape))
        scale, offset = 10.0 ** rng.uniform(-30, 30), 10.0 ** rng.uniform(-5, 8) * rng.choice([-1, 1])
        noise = 10.0 ** rng.uniform(-8, 0) * rng.standard_normal(shape)
        with np.errstate(over="ignore"):
            return (offset + scale * (waves + noise)).astype(dtype)

    return _seeded(field)


def spikes(dtype, shape):
    """A smooth or flat background with a few values far outside it."""
    def field(rng):
        x = np.zeros(shape) if rng.random() < 0.5 else np.cumsum(rng.standard_normal(shape), axis=-1)
        flat = x.reshape(-1)
        picks = rng.integers(0, flat.size, size=rng.integers(1, 6))
        flat[picks] = rng.choice([-1, 1], size=picks.size) * 10.0 ** rng.uniform(2, np.log10(np.finfo(dtype).max), size=picks.size)
        with np.errstate(over="ignore"):
            return x.astype(dtype)

    return _seeded(field)


def mixed_magnitudes(dtype, shape):
    """Log-uniform magnitudes over the whole exponent range, subnormals included."""
    info = np.finfo(dtype)
    lo, hi = np.log10(float(info.smallest_subnormal)), np.log10(float(info.max))

    def field(rng):
        with np.errstate(over="ignore"):
            return (rng.choice([-1, 1], size=shape) * 10.0 ** rng.uniform(lo, hi, size=shape)).astype(dtype)

    return _seeded(field)


KINDS = [arbitrary, constant, alternating, smooth_plus_noise, spikes, mixed_magnitudes]


@st.composite
def arrays(draw):
    dtype, shape = draw(DTYPES), draw(shapes())
    x = draw(st.sampled_from(KINDS).flatmap(lambda kind: kind(dtype, shape)))
    if draw(st.booleans()):  # sprinkle non-finite values into any of the above
        mask = draw(hnp.arrays(np.bool_, shape, elements=st.booleans(), fill=st.just(False)))
        special = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
        x = np.where(mask, special, x).astype(dtype)
    return x


def describe(x: np.ndarray) -> None:
    """Puts the failing array in the report in a form that can be pasted into a reproducer."""
    note(f"x = np.array({x.tolist()!r}, dtype=np.{x.dtype.name})  # shape {x.shape}")


def bounds():
    magnitudes = st.floats(-7, -1).map(lambda e: 10.0**e)
    return st.one_of(magnitudes.map(lambda v: {"abs": v}), magnitudes.map(lambda v: {"rel": v}))


SETTINGS = settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(x=arrays(), bound=bounds(), mode=st.sampled_from(["ratio", "speed"]))
def test_bound_and_nonfinite_values_hold(x, bound, mode):
    describe(x)
    stream = amrzip.compress(x, mode=mode, **bound)
    check(x, amrzip.decompress(stream), stream, **bound)


@SETTINGS
@given(x=arrays(), bound=bounds(), predictor=st.sampled_from(["lorenzo", "regression", "interpolation", "dual-quant"]))
def test_every_predictor_holds_the_bound(x, bound, predictor):
    describe(x)
    stream = amrzip.compress(x, predictor=predictor, **bound)
    check(x, amrzip.decompress(stream), stream, **bound)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(x=arrays(), mode=st.sampled_from(["ratio", "speed"]))
def test_abs_zero_is_exact(x, mode):
    describe(x)
    y = amrzip.decompress(amrzip.compress(x, abs=0, mode=mode))
    np.testing.assert_array_equal(y, x)  # values (NaN equal to NaN), as the bound promises
