"""A field written once and read at any resolution, over a region, progressively; then an
adaptive-resolution write that keeps full resolution only where the field is hot.

    .venv/bin/python examples/python/multires.py /tmp/mr

See docs/multires.md.
"""

import sys
from fractions import Fraction

import numpy as np

import amrzip
import amrzip.multires as mr

store = sys.argv[1] if len(sys.argv) > 1 else "mr"

n = 128
z, y, x = np.meshgrid(*[np.linspace(0, 1, n, dtype=np.float32)] * 3, indexing="ij")
temp = 300 + 900 * np.exp(-((x - 0.3) ** 2 + (y - 0.6) ** 2 + (z - 0.5) ** 2) / 0.01) + 5 * np.sin(20 * x) * np.cos(15 * y)

summary = mr.write({"temp": temp}, store, rel=1e-4, snapshot="full")
print(f"wrote {temp.nbytes / 1e6:.1f} MB in {summary['stored_bytes'] / 1e6:.2f} MB (ratio {summary['ratio']:.0f})")

ds = amrzip.open(store, snapshot="full")
coarse = ds.read("temp", resolution=Fraction(1, 64))  # every 4th point along each axis
print(f"1/64 resolution: {coarse.shape}, {ds.bytes_read / 1e3:.0f} kB read so far")
hot = ds.read("temp", region=(slice(20, 60), slice(60, 100), slice(10, 70)))
print(f"full resolution around the hot spot: {hot.shape}, {ds.bytes_read / 1e3:.0f} kB read so far")

ds = amrzip.open(store, snapshot="full")
for fraction, part in ds.progressive("temp"):
    print(f"progressive: 1/{fraction.denominator} -> {part.shape}, {ds.bytes_read / 1e3:.0f} kB read in all")

# Full resolution where temp reaches 600 K (tested per 16^3 tile), 1/512 of the points elsewhere.
adaptive = mr.write({"temp": temp}, store, rel=1e-4, snapshot="adaptive",
                    keep={"thresholds": [(600.0, 1)], "elsewhere": Fraction(1, 512)})
back = amrzip.open(store, snapshot="adaptive").read("temp")
inside = temp >= 600
worst = float(np.abs(back[inside] - temp[inside]).max())
print(f"adaptive: {adaptive['stored_bytes'] / 1e6:.2f} MB; largest error where temp >= 600 K: {worst:.3g} "
      f"(bound {adaptive['fields']['temp']['abs_bound']:.3g})")
