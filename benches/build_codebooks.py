"""Build the offline Huffman codebooks that ship inside the codec (CEAZ's offline codewords).

For each data class (one benchmark field each) and each alignment ratio, the field is compressed
at the bound that gives that ratio (fixed-ratio mode), so the classes' symbol histograms line up
as CEAZ prescribes; the histograms are normalised and written, with their class averages, into
crates/codec/src/entropy/offline_codebooks.bin, where the codec builds a covering codebook from
each. Rebuild the extension afterwards (make setup) to embed the new set.

Ids are permanent: a stream names its codebook by id, so a changed codebook takes a new id.
This script assigns ids from FIRST_ID in a fixed order; bump FIRST_ID when regenerating a set
whose contents change.

    .venv/bin/python benches/build_codebooks.py            # writes the set, prints a summary
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import datasets  # noqa: E402

import amrzip  # noqa: E402
from amrzip import _core  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "crates" / "codec" / "src" / "entropy" / "offline_codebooks.bin"
CLASSES = {"smooth": "smooth3d", "turbulent": "turbulence3d", "cosmology": "cosmology3d", "climate": "climate2d"}
# Bits per float32 value 2 and 1/2: the broad and the peaked histograms a stream meets.
RATIOS = (16, 64)
FIRST_ID = 1
# Probability mass dropped from each tail before the codebook's window is chosen: the coarsest
# interpolation levels leave a few huge codes that would otherwise widen every table to the
# whole alphabet. A chunk with a code outside the window simply gets a new codebook.
TAIL = 1e-5
# And at most this many codes either side of 0, so the embedded set stays small (a few KiB per
# codebook); fields whose codes reach further at these ratios get new codebooks anyway.
MAX_HALF_WIDTH = 1024
RADIUS = 32768  # symbol of code 0


def normalised_histogram(arr: np.ndarray, ratio: float) -> np.ndarray:
    eb = amrzip.info(amrzip.compress(arr, ratio=ratio))["abs_bound"]
    hist = _core._symbol_histogram(arr, eb, "ratio").astype(np.float64)
    p = hist / hist.sum()
    coded = p.copy()
    coded[0] = 0.0  # "unpredictable" stays in every codebook
    cum = np.cumsum(coded) / coded.sum()
    lo, hi = np.searchsorted(cum, TAIL / 2), np.searchsorted(cum, 1 - TAIL / 2)
    lo, hi = max(lo, RADIUS - MAX_HALF_WIDTH), min(hi, RADIUS + MAX_HALF_WIDTH)
    coded[:lo] = 0.0
    coded[hi + 1 :] = 0.0
    coded[0] = p[0]
    return coded / coded.sum()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-o", "--output", type=Path, default=OUT, help=f"set file to write [default: {OUT}]")
    args = p.parse_args(argv)

    books, next_id = [], FIRST_ID
    for ratio in RATIOS:
        per_class = {}
        for name, field in CLASSES.items():
            per_class[name] = normalised_histogram(datasets.load(field), ratio)
            print(f"  {name:10s} ratio {ratio:4d}: {np.count_nonzero(per_class[name])} symbols", file=sys.stderr, flush=True)
        per_class["average"] = np.mean(list(per_class.values()), axis=0)
        for name, prob in per_class.items():
            # Integer weights for the codec: 2^32 keeps the rarest kept symbol (>= TAIL/2) counted.
            weights = np.round(prob * 2.0**32).astype(np.uint64)
            books.append((next_id, f"{name}-r{ratio}", weights.tolist()))
            next_id += 1
    data = _core._offline_codebook_set(books)
    tmp = args.output.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(args.output)
    print(f"wrote {len(books)} codebooks, {len(data)} bytes, to {args.output}")
    for book_id, name, _ in books:
        print(f"  {book_id:3d} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
