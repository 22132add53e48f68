"""Instructions that writing and reading one field of a benchmark hierarchy take, counted by valgrind's callgrind:
per-box SZ3 (every box its own SZ3 stream, as amr_bench.py's per-box-sz3) against the AMR store's presets, one thread.
Unlike this 2-core VM's timings, which move by 20% from run to run, a count moves by a few percent at most (per-box
SZ3's write 308-323 M, read 178-189 M in four runs; the store's within 0.3%), so it shows what a change to the write
or read path saved.

    .venv/bin/python benches/instructions.py                                  # Nyx-like density, rel 1e-4
    .venv/bin/python benches/instructions.py --dataset warpx --field Ez --rel 1e-4

Needs valgrind (Debian: valgrind). Each count is one process run under callgrind, less the same process stopped
before the measured step (interpreter start, imports, loading the field), so it holds the step alone: write =
compress every box (SZ3) or amrzip.write; read = decompress every box (SZ3) or open the store and read every box.
Runs take a few minutes: callgrind executes some 50 times slower than the hardware.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import amr_bench as ab  # noqa: E402
from report import markdown_table  # noqa: E402

def child(plotfile: str, field: str, rel: float, step: str, mode: str, store: str, stop: bool) -> None:
    """One measured process: loads the field, then (unless ``stop``) runs ``step``."""
    import amrzip
    from amrzip import baselines

    if step == "read":
        if not stop:
            amrzip.open(store, threads=1).to_hierarchy().field_boxes(field)
        return
    h = amrzip.read(plotfile).only([field])
    if step == "write":
        if not stop:  # into a folder of its own: the read step's store is written beside it
            amrzip.write(h, tempfile.mkdtemp(dir=Path(store).parent), rel=rel, threads=1, mode=mode)
        return
    boxes = h.field_boxes(field)
    eb = rel * (max(float(a.max()) for a in boxes.values()) - min(float(a.min()) for a in boxes.values()))
    conf = baselines.sz3_config(eb)
    arrays = {k: np.ascontiguousarray(a.T) for k, a in boxes.items()}  # C order with x fastest, as on disk
    if step == "sz3-read":
        blobs = {k: baselines.sz3_compress(a, conf) for k, a in arrays.items()}
        if not stop:
            for k, b in blobs.items():
                baselines.sz3_decompress(b, arrays[k].dtype, arrays[k].shape)
    elif not stop:
        for a in arrays.values():
            baselines.sz3_compress(a, conf)


def count(args: list[str], keep: Path | None = None, name: str = "") -> int:
    """Instructions callgrind collects running this script with ``args``; its profile kept as ``keep/name`` if asked."""
    with tempfile.TemporaryDirectory() as tmp:
        profile = keep / name if keep else Path(tmp) / "cg.out"
        out = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={profile}", sys.executable, __file__, *args],
            capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"},
        )
    found = re.search(r"Collected : (\d+)", out.stderr)
    if out.returncode != 0 or not found:
        raise SystemExit(f"error: callgrind run {' '.join(args)} failed:\n{out.stderr[-2000:]}")
    return int(found.group(1))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="nyx", choices=sorted(ab.DATASETS))
    p.add_argument("--field", default="density")
    p.add_argument("--rel", type=float, default=1e-4)
    p.add_argument("--modes", default="ratio,speed", help="store presets to count (comma list)")
    p.add_argument("--keep", type=Path, metavar="DIR",
                   help="keep the measured runs' callgrind profiles here (callgrind_annotate shows where the work goes)")
    p.add_argument("--child", nargs=7, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        plotfile, field, rel, step, mode, store, stop = a.child
        child(plotfile, field, float(rel), step, mode, store, stop == "stop")
        return 0
    if shutil.which("valgrind") is None:
        raise SystemExit("error: valgrind not found (Debian: apt-get install valgrind)")
    import amrzip
    from amrzip.formats import write_plotfile

    if a.keep:
        a.keep.mkdir(parents=True, exist_ok=True)

    h = ab.DATASETS[a.dataset][1](False)
    if a.field not in h.fields:
        raise SystemExit(f"error: {a.dataset} has no field {a.field!r} (it has {', '.join(h.fields)})")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        plotfile = str(write_plotfile(h.only([a.field]), Path(tmp) / "plt"))
        runs = [("per-box SZ3", "-", ("sz3-write", "sz3-read"))]
        runs += [(f"amrzip {m}", m, ("write", "read")) for m in a.modes.split(",")]
        for name, mode, steps in runs:
            store = str(Path(tmp) / f"store-{mode}")
            counts = []
            for step in steps:
                if step == "read":
                    amrzip.write(amrzip.read(plotfile).only([a.field]), store, rel=a.rel, threads=1, mode=mode)
                args = ["--child", plotfile, a.field, str(a.rel), step, mode, store]
                print(f"counting {name} {step.split('-')[-1]} ...", file=sys.stderr, flush=True)  # minutes each
                profile = f"{name.replace(' ', '-')}.{step}.callgrind"
                counts.append(count(args + ["run"], a.keep, profile) - count(args + ["stop"]))
            rows.append([name, f"{counts[0] / 1e6:,.0f}", f"{counts[1] / 1e6:,.0f}"])
    print(f"{a.dataset}/{a.field}, rel {a.rel:g}, one thread: million instructions (callgrind)\n")
    print(markdown_table(["method", "write", "read every box"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
