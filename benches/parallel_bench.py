"""Parallel writes of AMR snapshots: amrzip.parallel against uncompressed MPI-IO and parallel
HDF5 with the SZ3 filter, in the same run; and the chunk owner assignment simulated for 64 to
4,096 ranks on the real files' boxes.

    .venv/bin/python benches/parallel_bench.py                        # both parts, 1, 2 and 4 ranks
    .venv/bin/python benches/parallel_bench.py --datasets nyx --ranks 2,4 --repeat 3
    .venv/bin/python benches/parallel_bench.py --h5py-python /opt/h5py-mpi/bin/python --h5py-mpiexec /usr/bin/mpiexec
    .venv/bin/python benches/parallel_bench.py --simulate-only

Writes: each dataset (amr_bench's loaders) is saved once with every box's values and, per rank
count, a knapsack distribution map (largest box first to the least-loaded rank, as AMReX); each
method then runs under mpiexec (benches/parallel_workers.py), every rank holding its boxes in
memory, timed from a barrier before the write to one after it (the snapshot committed, the file
closed). Effective bandwidth = raw bytes / that time; the best of --repeat runs. The bounds are
absolute, rel 1e-4 of each field's range over all its cells, the same for every method.

Parallel HDF5 needs h5py built with MPI (Debian libhdf5-openmpi-dev, then CC=mpicc HDF5_MPI=ON
HDF5_DIR=/usr/lib/x86_64-linux-gnu/hdf5/openmpi pip install --no-binary=h5py
--no-build-isolation h5py, about 8 minutes) and hdf5plugin, in an environment given by
--h5py-python and launched by that MPI's --h5py-mpiexec; without it the column is left out.

Simulation: the owner assignment of the writer (amrzip._core.simulate_owners: chunks at the
writer's box-sized edge, owners by access size less the workload penalty, carried over the
levels) for each real file, its boxes tiled along x until there are at least 32 boxes per rank,
with round-robin, knapsack and space-filling-curve distribution maps. Load = stored cells a
rank owns; the map's own balance (cells held) is shown beside it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import amr_bench as ab  # noqa: E402
import datasets  # noqa: E402
from report import markdown_table  # noqa: E402

import amrzip  # noqa: E402
from amrzip import _core  # noqa: E402
from amrzip.parallel.distribution import box_cells, distribute  # noqa: E402

HERE = Path(__file__).resolve().parent
WORKER = HERE / "parallel_workers.py"
REL = 1e-4
SIM_RANKS = [64, 256, 1024, 4096]
# Boxes per rank the tiled hierarchies reach, at least: with few, a coarse box alone outweighs a
# rank's average load (the distribution map's max/avg is then 3-4 on the Nyx-like hierarchy at 8
# boxes a rank), and the simulation measures box sizes, not the assignment.
BOXES_PER_RANK = 32


def save_case(name: str, h, ranks: list[int], path: Path) -> int:
    """Writes the npz parallel_workers.py reads; returns the raw bytes."""
    arrays = {"dim": h.dim, "levels": h.num_levels, "fields": np.array(h.fields), "prob_lo": np.array(h.prob_lo), "prob_hi": np.array(h.prob_hi)}
    arrays["dtypes"] = np.array([np.dtype(h.dtype(f)).str for f in h.fields])
    lo = {f: math.inf for f in h.fields}
    hi = {f: -math.inf for f in h.fields}
    raw = 0
    for L, lev in enumerate(h.levels):
        arrays[f"boxes_{L}"] = np.array(lev.boxes, dtype=np.int64).reshape(-1)
        arrays[f"domain_{L}"] = np.array(lev.domain, dtype=np.int64)
        arrays[f"ratio_{L}"] = np.array(lev.ref_ratios, dtype=np.int64)
        for n in ranks:
            arrays[f"owners_{n}_{L}"] = distribute(lev.boxes, n, "knapsack")
        for f in h.fields:
            # Boxes in C order, one after another.
            values = np.concatenate([np.ascontiguousarray(a).ravel() for a in lev.field_data(f)])
            arrays[f"data_{L}_{f}"] = values
            raw += values.nbytes
            lo[f], hi[f] = min(lo[f], float(np.nanmin(values))), max(hi[f], float(np.nanmax(values)))
    arrays["abs_bounds"] = np.array([REL * (hi[f] - lo[f]) for f in h.fields])
    np.savez(path, **arrays)
    return raw


def run(mpiexec: str, python: str, case: Path, method: str, n: int, out: Path, timeout: float, mode: str, worker: Path = WORKER) -> dict:
    if out.exists():
        shutil.rmtree(out) if out.is_dir() else out.unlink()
    cmd = [mpiexec, "-n", str(n), python, str(worker), str(case), method, str(n), str(out), mode]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def writes(args) -> list[list[str]]:
    rows = []
    methods = [(f"amrzip-{m}", args.mpiexec, sys.executable) for m in args.modes] + [("mpiio", args.mpiexec, sys.executable)]
    if args.h5py_python:
        methods.append(("h5py-sz3", args.h5py_mpiexec, args.h5py_python))
    else:
        print("parallel HDF5 left out: no --h5py-python (see this script's docstring)", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.datasets:
            h = ab.DATASETS[name][1](False)
            case = Path(tmp) / f"{name}.npz"
            raw = save_case(name, h, args.ranks, case)
            for n in args.ranks:
                best = {}
                for _ in range(args.repeat):
                    for method, mpiexec, python in methods:
                        worker, mode = method.split("-", 1) if method.startswith("amrzip-") else (method, "ratio")
                        r = run(mpiexec, python, case, worker, n, Path(tmp) / f"{name}-{method}-{n}", args.timeout, mode)
                        if method not in best or r["seconds"] < best[method]["seconds"]:
                            best[method] = r
                raw_seconds = best["mpiio"]["seconds"]
                for method, r in best.items():
                    bw = raw / r["seconds"] / 1e6
                    ours = method.startswith("amrzip")
                    # The file system's bandwidth per rank below which this method writes 2x faster
                    # than raw MPI-IO, if the write's other costs stay what they were here.
                    spare = r["seconds"] - r["stored_bytes"] / raw * raw_seconds
                    twice = (raw - 2 * r["stored_bytes"]) / (2 * spare * n) / 1e6 if ours and spare > 0 and raw > 2 * r["stored_bytes"] else None
                    rows.append([name, str(n), method, f"{raw / 1e6:.1f}", f"{raw / r['stored_bytes']:.2f}", f"{r['seconds']:.2f}",
                                 f"{bw:.0f}", f"{bw / (raw / raw_seconds / 1e6):.3f}x", "-" if twice is None else f"{twice:.0f}"])
                    print(" | ".join(rows[-1]), file=sys.stderr)
    return rows


VARIABLES_WORKER = HERE / "parallel_variables.py"
PATTERNS = ["checkerboard", "flash", "many"]


def pattern_variables(pattern: str) -> list[tuple[str, np.ndarray, tuple]]:
    """(name, array, chunk shape) of a pattern's variables.

    - checkerboard: the three synthetic 256^3 float32 fields of codec_bench, 64^3 chunks;
    - flash: nine 128^3 Gaussian random fields (three spectra, three seeds, the reddest
      exponentiated to a lognormal density) cut into 512 blocks of 16^3, FLASH's unknowns, in
      chunks of 32 blocks;
    - many: every level of every field of the real PeleLMeX plotfile, flattened to 1-D (111
      variables), each one chunk."""
    if pattern == "checkerboard":
        return [(n, datasets.load(n), (64, 64, 64)) for n in ("smooth3d", "turbulence3d", "cosmology3d")]
    if pattern == "flash":
        out = []
        for k, (slope, seed) in enumerate((s, 100 + j) for s in (-11 / 3, -3.0, -4.0) for j in range(3)):
            f = datasets.gaussian_random_field((128, 128, 128), slope, seed)
            if slope == -4.0:
                f = np.exp(f)
            blocks = f.reshape(8, 16, 8, 16, 8, 16).transpose(0, 2, 4, 1, 3, 5).reshape(512, 16, 16, 16)
            out.append((f"var{k}", np.ascontiguousarray(blocks), (32, 16, 16, 16)))
        return out
    cases = [(n, a) for n, a in datasets.real_fields(want=lambda n: n.startswith("pelelmex_3d/"))]
    return [(n.replace("/", "_").replace("(", "").replace(")", ""), np.ascontiguousarray(a).reshape(-1), (a.size,)) for n, a in cases]


def patterns(args) -> tuple[list[list[str]], list[list[str]]]:
    """The plain-variable patterns, every method at each rank count, in the same run; and the
    reads of the ratio-mode files."""
    rows, read_rows = [], []
    methods = [(m, args.mpiexec, sys.executable) for m in ("amrzip", "amrzip-noagg", "amrzip-speed", "mpiio")]
    if args.h5py_python:
        methods.append(("h5py-sz3", args.h5py_mpiexec, args.h5py_python))
    with tempfile.TemporaryDirectory() as tmp:
        for pattern in args.patterns:
            variables = pattern_variables(pattern)
            if not variables:
                print(f"{pattern}: no data (the real files are not in ../shared/data)", file=sys.stderr)
                continue
            case = Path(tmp) / f"{pattern}.npz"
            arrays = {"pattern": pattern, "names": np.array([n for n, _, _ in variables])}
            bounds = []
            for k, (_, a, chunks) in enumerate(variables):
                arrays[f"var_{k}"], arrays[f"chunks_{k}"] = a, np.array(chunks)
                bounds.append(REL * float(np.nanmax(a) - np.nanmin(a)))
            arrays["abs_bounds"] = np.array(bounds)
            np.savez(case, **arrays)
            raw = sum(a.nbytes for _, a, _ in variables)
            del arrays, variables
            for n in args.ranks:
                best = {}
                for _ in range(args.repeat):
                    for method, mpiexec, python in methods:
                        r = run(mpiexec, python, case, method, n, Path(tmp) / f"{pattern}-{method}-{n}", args.timeout, "", VARIABLES_WORKER)
                        if method not in best or r["seconds"] < best[method]["seconds"]:
                            best[method] = r
                bw = {m: raw / r["seconds"] / 1e6 for m, r in best.items()}
                for workload, rd in best["amrzip"]["reads"].items():
                    # Whole-variable reads deliver every byte to every rank.
                    volume = raw * (n if workload == "whole" else 1)
                    read_rows.append([pattern, str(n), workload, *(f"{volume / rd[m] / 1e6:.0f}" for m in ("independent", "collective", "auto")), rd["chosen"]])
                for method, r in best.items():
                    vs = [f"{bw[method] / bw[ref]:.2f}x" if ref in bw else "-" for ref in ("mpiio", "h5py-sz3", "amrzip-noagg")]
                    rows.append([pattern, str(n), method, f"{raw / 1e6:.1f}", f"{raw / r['stored_bytes']:.2f}", f"{r['seconds']:.3f}", f"{bw[method]:.0f}", *vs])
                    print(" | ".join(rows[-1]), file=sys.stderr)
    return rows, read_rows


def tiled(h, copies: int) -> list[tuple]:
    """The levels of `h` with its boxes repeated `copies` times along x (domains widened)."""
    levels = []
    for lev in h.levels:
        (lo, hi) = lev.domain
        width = hi[0] - lo[0] + 1
        boxes = [((blo[0] + k * width, *blo[1:]), (bhi[0] + k * width, *bhi[1:])) for k in range(copies) for blo, bhi in lev.boxes]
        domain = ((lo[0], *lo[1:]), (lo[0] + copies * width - 1, *hi[1:]))
        levels.append((domain, lev.ref_ratios, boxes))
    return levels


def simulate(args) -> list[list[str]]:
    rows = []
    for name in args.sim_datasets:
        h = ab.DATASETS[name][1](False)
        nboxes = sum(lev.num_boxes for lev in h.levels)
        for ranks in args.sim_ranks:
            copies = max(1, math.ceil(args.boxes_per_rank * ranks / nboxes))
            levels = tiled(h, copies)
            for how in ("round-robin", "knapsack", "sfc"):
                spec = [
                    ((list(d[0]), list(d[1])), list(r), [(list(b[0]), list(b[1])) for b in boxes], distribute(boxes, ranks, how).tolist())
                    for d, r, boxes in levels
                ]
                owned, moved = _core.simulate_owners(spec, list(h.nodal), ranks)
                owned = np.array(owned)
                total = owned.sum()
                # The distribution map's own balance, in cells held (covered ones included).
                held = sum(np.bincount(s[3], weights=box_cells(s[2]), minlength=ranks) for s in spec)
                rows.append([name, str(ranks), str(copies * nboxes), how, f"{held.max() / held.mean():.3f}",
                             f"{owned.max() / owned.mean():.3f}", f"{moved / total:.1%}"])
                print(" | ".join(rows[-1]), file=sys.stderr)
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="nyx,pelelmex_3d,warpx", help="amr_bench datasets to write (default nyx,pelelmex_3d,warpx)")
    p.add_argument("--ranks", default="1,2,4", help="rank counts of the writes (default 1,2,4)")
    p.add_argument("--repeat", type=int, default=2, help="runs per measurement, the best kept (default 2)")
    p.add_argument("--modes", default="ratio,speed", help="amrzip's presets to run (default ratio,speed)")
    p.add_argument("--mpiexec", default=shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or "mpiexec")
    p.add_argument("--h5py-python", help="a Python whose h5py is built with MPI (and has hdf5plugin)")
    p.add_argument("--h5py-mpiexec", default="/usr/bin/mpiexec", help="the mpiexec of that h5py's MPI (default /usr/bin/mpiexec)")
    p.add_argument("--sim-datasets", default="nyx,pelelmex_3d,advection_2d,warpx", help="datasets whose boxes the simulation tiles")
    p.add_argument("--sim-ranks", default=",".join(map(str, SIM_RANKS)))
    p.add_argument("--boxes-per-rank", type=int, default=BOXES_PER_RANK, help=f"the tiling's boxes per rank, at least (default {BOXES_PER_RANK})")
    p.add_argument("--patterns", default=",".join(PATTERNS), help=f"plain-variable patterns to write (default {','.join(PATTERNS)}; '' for none)")
    p.add_argument("--simulate-only", action="store_true")
    p.add_argument("--timeout", type=float, default=600, help="seconds one write may take before it counts as hung (default 600)")
    p.add_argument("--json", help="also write the tables here")
    args = p.parse_args()
    args.datasets = [d for d in args.datasets.split(",") if d]
    args.sim_datasets = [d for d in args.sim_datasets.split(",") if d]
    args.ranks = [int(v) for v in args.ranks.split(",")]
    args.modes = [m for m in args.modes.split(",") if m]
    args.sim_ranks = [int(v) for v in args.sim_ranks.split(",")]
    args.patterns = [p for p in args.patterns.split(",") if p]
    out = {}
    if not args.simulate_only:
        rows = writes(args)
        out["writes"] = rows
        print("\nParallel writes (effective bandwidth = raw bytes / wall time; vs raw: its ratio to raw MPI-IO's; 2x raw below:"
              " the file-system MB/s per rank under which it writes twice as fast as raw MPI-IO)\n")
        print(markdown_table(["dataset", "ranks", "method", "raw MB", "ratio", "seconds", "MB/s", "vs raw", "2x raw below"], rows))
    if not args.simulate_only and args.patterns:
        rows, read_rows = patterns(args)
        out["patterns"], out["pattern_reads"] = rows, read_rows
        print("\nPlain variables (effective bandwidth = raw bytes / wall time; vs: its bandwidth over that method's)\n")
        print(markdown_table(["pattern", "ranks", "method", "raw MB", "ratio", "seconds", "MB/s", "vs raw MPI-IO", "vs HDF5+SZ3",
                              "vs no aggregation"], rows))
        print("\nReading back (own: every rank its puts' regions; whole: every rank every variable whole; a collective call"
              " each; MB/s of raw bytes delivered)\n")
        print(markdown_table(["pattern", "ranks", "reads", "independent", "through owners", "auto", "auto chose"], read_rows))
    rows = simulate(args)
    out["simulation"] = rows
    print("\nChunk owners simulated (load: stored cells owned; moved: share of stored cells sent to another rank)\n")
    print(markdown_table(["dataset", "ranks", "boxes", "distribution", "map's max/avg", "owners' max/avg", "moved"], rows))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
