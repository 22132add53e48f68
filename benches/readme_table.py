"""Prints the README's benchmark table from a codec_bench.py --json file.

    .venv/bin/python benches/readme_table.py benches/data/run.json
"""

from __future__ import annotations

import json
import sys

FIELDS = ["smooth3d", "turbulence3d", "cosmology3d", "climate2d"]
BOUNDS = [1e-2, 1e-3, 1e-4, 1e-5]
SZ3 = ["sz3-interp_lorenzo", "sz3-interp", "sz3-lorenzo_reg"]


def main(path: str) -> None:
    results = json.load(open(path))["results"]
    rows = {(r["field"], r["bound"], r["codec"]): r for r in results}
    print("| field | rel bound | amrzip ratio | PSNR dB | SZ3-best ratio (algorithm) | amrzip / SZ3-best "
          "| amrzip `speed` ratio | ZFP ratio | amrzip MB/s compress / decompress | SZ3 default MB/s compress / decompress |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for f in FIELDS:
        for b in BOUNDS:
            ours, speed, zfp = (rows[(f, b, c)] for c in ("amrzip-ratio", "amrzip-speed", "zfp"))
            best_codec = max(SZ3, key=lambda c: rows[(f, b, c)]["ratio"])
            best, default = rows[(f, b, best_codec)], rows[(f, b, "sz3-interp_lorenzo")]
            print(f"| {f} | {b:g} | {ours['ratio']:.4g} | {ours['psnr']:.1f} | {best['ratio']:.4g} ({best_codec[4:]}) "
                  f"| {ours['ratio'] / best['ratio']:.2f} | {speed['ratio']:.4g} | {zfp['ratio']:.3g} "
                  f"| {ours['c_mbs']:.0f} / {ours['d_mbs']:.0f} | {default['c_mbs']:.0f} / {default['d_mbs']:.0f} |")


if __name__ == "__main__":
    main(sys.argv[1])
