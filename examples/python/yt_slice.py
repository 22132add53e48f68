"""A store opened in yt: a slice plot of a snapshot, read lazily, with no plotfile in between.

    .venv/bin/python examples/python/yt_slice.py /tmp/out [plotfile or Chombo file]

Without a file, a small synthetic Nyx-like hierarchy is written. The PNG goes to OUT. See docs/yt.md.
"""

import sys
from pathlib import Path

import yt

import amrzip
from amrzip.amr import synthetic

out = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
out.mkdir(parents=True, exist_ok=True)
h = amrzip.read(sys.argv[2]) if len(sys.argv) > 2 else synthetic.nyx_like(n=32)
store = out / "run"
summary = amrzip.write(h, store, rel=1e-4)
print(f"wrote {summary['snapshot']}: {summary['original_bytes'] / 1e6:.1f} MB in {summary['stored_bytes'] / 1e6:.2f} MB")

ds = yt.load(str(store))  # the latest snapshot; yt.load(store, snapshot="name") picks another
field = ("amrzip", ds.store.fields[0])
plot = yt.SlicePlot(ds, "z", field)
# Linear: values near zero may come back slightly negative (within the bound), which a log scale hides.
plot.set_log(field, False)
plot.annotate_grids(periodic=False)
saved = plot.save(str(out / f"{field[1]}_slice.png"))[0]
print(f"{saved}: the slice read {ds.store.bytes_read / 1e3:.0f} kB of the snapshot's {ds.store.stored_bytes / 1e3:.0f} kB")
