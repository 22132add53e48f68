"""The AMR snapshot store of this build against another build (the baseline), in one run: write and read
time, every byte the store takes, its allocated blocks (`du`) and its file count.

    .venv/bin/python benches/store_bench.py                      # default: ../baseline (its .venv) against this build
    .venv/bin/python benches/store_bench.py --baseline DIR|PYTHON --json benches/data/store.json
    .venv/bin/python benches/store_bench.py --quick              # smoke run (~20 s): small Nyx, two files, one bound
    .venv/bin/python benches/store_bench.py --parts files --plotfile   # the real files and the Nyx-like plotfile
    .venv/bin/python benches/store_bench.py --parts files --chombo     # ... and as a Chombo file with ghost cells

Each build runs in processes of its own, with its own Python (``--baseline`` names a checkout with a ``.venv`` or a
Python executable; this build is the Python running the script), on the same inputs.  The builds take turns
(baseline, this build, this build, baseline, ...: each goes first every other round) for ``--rounds`` rounds per part,
so that machine noise hits both; new/old ratios are of medians over all runs, with their spread over the rounds
(per-round ratios, min-max).

Parts:

- **demo**: ``make demo``'s AMR part as ``amrzip.amr_demo.run`` does it: the Nyx-like hierarchy ``nyx_like(seed=0)``
  (generated once by this build and cached under ``benches/data/``; ``amrzip/amr/synthetic.py`` must be the same in
  both builds), ``amrzip.write(h, tmp/"nyx.amrzip", rel=1e-4, threads=None)`` timed as the demo times it, the demo's
  read back (``amr_demo.measure``: every box of every field through ``Dataset.level(L).field(f)`` plus the leaf-cell
  metrics) timed as the demo times it, then, each on a fresh ``amrzip.open``, every box of every level and field read
  alone (no metrics) and the demo's one box of density on the finest level.
- **files**: every real file of ``../shared/data`` that ``amrzip.read`` reads (each build's own reader), at each
  ``--bounds`` (rel): ``amrzip.write(amrzip.read(file), ...)`` (boxes loaded by the reader as the writer asks, from
  the page cache), then on fresh opens every box of every level and field, and one box (the middle box of the finest
  level, first field).  With ``--plotfile``, also the demo's Nyx-like hierarchy as an AMReX plotfile (written by this
  build's ``write_plotfile`` under ``benches/data/``): its boxes are views into memory-mapped FAB files, most of them
  misaligned, as the boxes of a simulation's plotfile are.  With ``--chombo``, also that hierarchy as a Chombo HDF5
  plot file with one ghost cell around every box (``tests/hdf5_files.py``, h5py), its boxes in one memory-mapped
  dataset per level.  ``--mode speed`` writes the files in the speed preset (the demo part keeps the demo's).

Throughput is ``original bytes`` (the summary's ``original_bytes``: every cell of every box, covered ones included,
in the source dtype; the same for both builds) per second of wall-clock time.  Sizes: **reported** is the summary's
``stored_bytes`` as each build reports it (the baseline: chunk payload and shared tables only; this build: the
snapshot file); **all bytes** is the sum of the sizes of every file under the store's path; **du** the blocks
allocated to the store's path and everything under it, folders included (``st_blocks`` x 512, what ``du -s -B1``
counts); **files** the number of regular files.  Stores are written to a temporary folder (``--tmpdir``) and read
back from the page cache.  Progress goes to stderr, tables to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
DATA = REPO.parent / "shared" / "data"
CACHE = BENCH_DIR / "data"
DEMO_REL = 1e-4  # amr_demo.REL
# The real files, as paths under DATA; those amrzip.read refuses in a build are reported as such.
FILES = [
    "amrex/pelelmex_3d",
    "amrex/warpx_single_level",
    "amrex/advection_2d_4levels",
    "chombo/bisicles/ase-ctrl-reference.H5",
    "chombo/bisicles/asebm2-ctrldata-4km.2d.H5",
    "chombo/bisicles/asebm2-geometry-4km.2d.H5",
    "chombo/bisicles/stream.reference.000000.2d.H5",
    "chombo/bisicles/chk.mismip3D.Benn.ssa.0lev.013000.2d.hdf5",
]
QUICK_FILES = ["amrex/pelelmex_3d", "chombo/bisicles/ase-ctrl-reference.H5"]


# --- the child: runs in one build's Python, prints JSON ----------------------------------------------------------


def store_usage(path: Path) -> dict:
    """Every file under ``path`` (name -> size), their sum, the allocated blocks of everything (folders too)."""
    files, du = {}, 0
    for p in [path, *sorted(path.rglob("*"))] if path.is_dir() else [path]:
        st = p.lstat()
        du += st.st_blocks * 512
        if p.is_file():
            files[str(p.relative_to(path)) if p != path else p.name] = st.st_size
    return {"files": files, "all_bytes": sum(files.values()), "du": du, "nfiles": len(files)}


def nyx_cache(n: int) -> Path:
    return CACHE / f"store_bench_nyx_n{n}_seed0.npz"


def make_nyx_cache(n: int) -> None:
    """nyx_like(n=n, seed=0) of this build, saved with what Hierarchy.from_arrays needs to rebuild it."""
    import numpy as np

    from amrzip.amr.synthetic import nyx_like

    path = nyx_cache(n)
    if path.exists():
        return
    kwargs = {} if n == 64 else {"n": n}
    h = nyx_like(seed=0, **kwargs)
    spec = {"fields": list(h.fields), "prob_lo": list(h.prob_lo), "prob_hi": list(h.prob_hi), "time": h.time, "step": h.step,
            "attrs": json.loads(json.dumps(h.attrs, default=str)), "levels": []}
    arrays = {}
    for L, lev in enumerate(h.levels):
        level = {"boxes": [[list(lo), list(hi)] for lo, hi in lev.boxes], "domain": [list(lev.domain[0]), list(lev.domain[1])],
                 "owners": list(lev.owners)}
        if L + 1 < h.num_levels:
            level["ref_ratio"] = list(lev.ref_ratios)
        spec["levels"].append(level)
        for fi, f in enumerate(h.fields):
            for i in range(lev.num_boxes):
                arrays[f"L{L}_f{fi}_b{i}"] = lev.box_data(f, i)
    CACHE.mkdir(exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, spec=np.frombuffer(json.dumps(spec).encode(), dtype=np.uint8), **arrays)
    os.replace(tmp, path)


def nyx_plotfile(n: int) -> Path:
    """The cached Nyx-like hierarchy as an AMReX plotfile, written by this build (made once)."""
    from amrzip.formats.plotfile import write_plotfile

    path = CACHE / f"store_bench_nyx_n{n}_plotfile"
    if not path.exists():
        make_nyx_cache(n)
        tmp = path.with_name(path.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        write_plotfile(load_nyx(n), tmp)
        os.replace(tmp, path)
    return path


def nyx_chombo(n: int) -> Path:
    """The cached Nyx-like hierarchy as a Chombo HDF5 plot file with one ghost cell around every box (as Chombo
    codes write them), written with h5py by the tests' writer (made once)."""
    sys.path.insert(0, str(REPO / "tests"))
    from hdf5_files import write_chombo

    path = CACHE / f"store_bench_nyx_n{n}_ghost1.chombo.hdf5"
    if not path.exists():
        make_nyx_cache(n)
        tmp = path.with_name(path.name + ".tmp")
        write_chombo(load_nyx(n), tmp, ghost=1)
        os.replace(tmp, path)
    return path


def load_nyx(n: int):
    """The cached Nyx-like hierarchy, rebuilt with this process's amrzip (arrays in memory, as nyx_like gives them)."""
    import numpy as np

    from amrzip.amr.hierarchy import Hierarchy

    with np.load(nyx_cache(n)) as z:
        spec = json.loads(z["spec"].tobytes())
        levels = []
        for L, level in enumerate(spec["levels"]):
            data = {f: [np.array(z[f"L{L}_f{fi}_b{i}"]) for i in range(len(level["boxes"]))] for fi, f in enumerate(spec["fields"])}
            levels.append({**level, "data": data})
    return Hierarchy.from_arrays(levels, prob_lo=spec["prob_lo"], prob_hi=spec["prob_hi"], time=spec["time"], step=spec["step"],
                                 attrs=spec["attrs"])


def read_all(amrzip, path: Path) -> int:
    """Fresh open, every box of every level and field through Dataset.level(L).field(f); returns the values read."""
    ds = amrzip.open(path)
    n = 0
    for L in range(ds.num_levels):
        for f in ds.fields:
            for a in ds.level(L).field(f):
                n += a.size
    return n


def read_box(amrzip, path: Path, field: str | None = None) -> tuple[int, int]:
    """Fresh open, the middle box of the finest level of ``field`` (default the first); (values, bytes read)."""
    ds = amrzip.open(path)
    L = ds.num_levels - 1
    boxes = ds.level(L).boxes
    a = ds.read(field or ds.fields[0], region=boxes[len(boxes) // 2], level=L)
    return a.size, ds.bytes_read


def timed(f):
    """(wall seconds, CPU seconds of this process's threads, f())."""
    start, cpu = time.perf_counter(), time.process_time()
    out = f()
    return time.perf_counter() - start, time.process_time() - cpu, out


def child_demo(args: dict) -> dict:
    import amrzip
    from amrzip import amr_demo

    h = load_nyx(args["n"])
    runs = []
    for _ in range(args["repeat"]):
        with tempfile.TemporaryDirectory(prefix="store_bench_", dir=args["tmpdir"]) as tmp:
            path = Path(tmp) / "nyx.amrzip"
            # As amr_demo.run: the write, then the demo's read back (measure) on the store just opened.
            (t_write, c_write, summary) = timed(lambda: amrzip.write(h, path, rel=amr_demo.REL, threads=None))
            ds = amrzip.open(path)
            (t_demo_read, c_demo_read, results) = timed(lambda: amr_demo.measure(h, ds, summary))
            (t_read_all, c_read_all, values) = timed(lambda: read_all(amrzip, path))
            (t_box, _, (box_values, box_bytes)) = timed(lambda: read_box(amrzip, path, "density"))
            runs.append({"write": t_write, "demo_read": t_demo_read, "read_all": t_read_all, "box": t_box,
                         "cpu_write": c_write, "cpu_demo_read": c_demo_read, "cpu_read_all": c_read_all,
                         "values": values, "box_bytes": box_bytes, "usage": store_usage(path),
                         "original_bytes": summary["original_bytes"], "reported_bytes": summary["stored_bytes"],
                         "max_err_over_bound": max(r.error_over_bound for r in results)})
    boxes = [lev.num_boxes for lev in h.levels]
    return {"amrzip": str(Path(amrzip.__file__).parent), "boxes": boxes, "runs": runs}


def child_files(args: dict) -> dict:
    import amrzip

    out = {"amrzip": str(Path(amrzip.__file__).parent), "cases": {}}
    # One untimed write and read first: the first calls of a process pay for lazy imports and
    # first-use set-ups (thread pool, allocator) that the timed cases should not.
    if args["files"]:
        with tempfile.TemporaryDirectory(prefix="store_bench_", dir=args["tmpdir"]) as tmp:
            try:
                amrzip.write(amrzip.read(DATA / args["files"][0]), Path(tmp) / "w.amrzip", rel=max(args["bounds"]), mode=args["mode"])
                read_all(amrzip, Path(tmp) / "w.amrzip")
                read_box(amrzip, Path(tmp) / "w.amrzip")
            except Exception:
                pass
    for name in args["files"]:
        try:
            h = amrzip.read(DATA / name)
        except Exception as e:  # a file this build's reader refuses
            out["cases"][name] = {"error": f"{type(e).__name__}: {e}"}
            continue
        for rel in args["bounds"]:
            runs = []
            for _ in range(args["repeat"]):
                with tempfile.TemporaryDirectory(prefix="store_bench_", dir=args["tmpdir"]) as tmp:
                    path = Path(tmp) / "s.amrzip"
                    (t_write, c_write, summary) = timed(lambda: amrzip.write(h, path, rel=rel, mode=args["mode"]))
                    (t_read_all, c_read_all, values) = timed(lambda: read_all(amrzip, path))
                    (t_box, _, (box_values, box_bytes)) = timed(lambda: read_box(amrzip, path))
                    runs.append({"write": t_write, "read_all": t_read_all, "box": t_box, "values": values, "box_bytes": box_bytes,
                                 "cpu_write": c_write, "cpu_read_all": c_read_all,
                                 "usage": store_usage(path), "original_bytes": summary["original_bytes"],
                                 "reported_bytes": summary["stored_bytes"]})
            out["cases"][f"{name}@{rel:g}"] = {"file": name, "rel": rel, "levels": h.num_levels, "fields": len(h.fields),
                                               "boxes": sum(lev.num_boxes for lev in h.levels), "runs": runs}
    return out


# --- the parent ----------------------------------------------------------------------------------------------------


def baseline_python(arg: Path) -> Path:
    p = arg / ".venv" / "bin" / "python" if arg.is_dir() else arg
    if not p.exists():
        raise SystemExit(f"store_bench: no baseline Python at {p} (give --baseline DIR with a .venv, or a python executable)")
    return p


def run_child(python: str, part: str, args: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # The child's working folder is neutral: no amrzip/ beside it can shadow the build's package.
    done = subprocess.run([python, str(Path(__file__).resolve()), "--child", part], input=json.dumps(args), env=env,
                          capture_output=True, text=True, cwd=args["tmpdir"] or tempfile.gettempdir())
    if done.returncode:
        raise SystemExit(f"store_bench: the {part} child ({python}) failed:\n{done.stderr}")
    return json.loads(done.stdout)


def med(xs):
    return statistics.median(xs)


def spread(xs) -> str:
    """min-max of times as a percentage around their median."""
    m = med(xs)
    return f"{100 * (min(xs) - m) / m:+.0f}/{100 * (max(xs) - m) / m:+.0f}%" if m > 0 and len(xs) > 1 else "-"


def mbs(nbytes: int, times) -> float:
    return nbytes / 1e6 / med(times)


def paired(old_rounds, new_rounds, key) -> tuple[float, float, float]:
    """new/old throughput: median(old times)/median(new times) over all runs, and the min and max of the per-round
    ratios (each round's old and new runs ran next to each other)."""
    all_old = [r[key] for rs in old_rounds for r in rs]
    all_new = [r[key] for rs in new_rounds for r in rs]
    per_round = [med([r[key] for r in o]) / med([r[key] for r in n]) for o, n in zip(old_rounds, new_rounds)]
    return med(all_old) / med(all_new), min(per_round), max(per_round)


def fmt_ratio(t) -> str:
    r, lo, hi = t
    return f"{r:.2f} ({lo:.2f}-{hi:.2f})"


def kb(n) -> str:
    return f"{n / 1e3:,.1f}"


def sizes_of(runs) -> dict:
    """The store sizes of a case's runs (checked to be the same in every run)."""
    first = runs[0]
    keys = ("all_bytes", "du", "nfiles")
    for r in runs[1:]:
        if r["reported_bytes"] != first["reported_bytes"] or r["usage"]["all_bytes"] != first["usage"]["all_bytes"]:
            print(f"warning: store sizes differ between runs ({first['usage']['all_bytes']} vs {r['usage']['all_bytes']})", file=sys.stderr)
    return {"original": first["original_bytes"], "reported": first["reported_bytes"], **{k: first["usage"][k] for k in keys},
            "du_max": max(r["usage"]["du"] for r in runs)}


def main(argv=None) -> int:
    from report import geomean, markdown_table

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline", type=Path, default=REPO.parent / "baseline",
                   help="the other build: a checkout with a .venv, or its Python (default ../baseline)")
    p.add_argument("--parts", default="demo,files", help="comma list of demo, files (default both)")
    p.add_argument("--files", help="comma list of file path prefixes under ../shared/data (default all that read)")
    p.add_argument("--plotfile", action="store_true",
                   help="files part: also the Nyx-like hierarchy as an AMReX plotfile (written by this build, cached)")
    p.add_argument("--chombo", action="store_true",
                   help="files part: also the Nyx-like hierarchy as a Chombo HDF5 file with ghost cells (needs h5py; cached)")
    p.add_argument("--mode", choices=["ratio", "speed"], default="ratio", help="preset of the files part's writes (default ratio)")
    p.add_argument("--bounds", help="rel bounds for the files part (default 1e-4,1e-2; --quick: 1e-2)")
    p.add_argument("--rounds", type=int, help="processes per build and part, taking turns (default 6)")
    p.add_argument("--repeat", type=int, help="timed runs per case and process (default 1 demo, 3 files)")
    p.add_argument("--quick", action="store_true", help="smoke run: Nyx-like with n=32, two files, rel 1e-2, 2 rounds of 1")
    p.add_argument("--tmpdir", help="where the stores are written (default the system's temporary folder)")
    p.add_argument("--json", type=Path, help="write every run's numbers here")
    p.add_argument("--child", choices=["demo", "files"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        job = json.loads(sys.stdin.read())
        print(json.dumps(child_demo(job) if args.child == "demo" else child_files(job)))
        return 0

    parts = [s for s in args.parts.split(",") if s]
    bounds = [float(b) for b in (args.bounds or ("1e-2" if args.quick else "1e-4,1e-2")).split(",")]
    files = QUICK_FILES if args.quick else FILES
    if args.files:
        files = [f for f in FILES if any(f.startswith(s) for s in args.files.split(","))]
    n = 32 if args.quick else 64
    if args.plotfile:
        # Its boxes are views into memory-mapped FAB files, as a simulation's plotfile gives them.
        files = [*files, str(nyx_plotfile(n))]
    if args.chombo:
        # One mapped dataset per level holding every box grown by its ghost cells, as Chombo codes write them.
        files = [*files, str(nyx_chombo(n))]
    builds = {"old": str(baseline_python(args.baseline)), "new": sys.executable}
    load_start = os.getloadavg()
    t0 = time.perf_counter()
    raw: dict = {"builds": builds, "parts": {}}
    if "demo" in parts:
        print(f"caching nyx_like(n={n}, seed=0) in {nyx_cache(n)}", file=sys.stderr)
        make_nyx_cache(n)
    for part in parts:
        rounds = args.rounds or (2 if args.quick else 6)
        repeat = args.repeat or (1 if args.quick or part == "demo" else 3)
        job = {"n": n, "repeat": repeat, "files": files, "bounds": bounds, "tmpdir": args.tmpdir, "mode": args.mode}
        got = {"old": [], "new": []}
        for k in range(rounds):
            for b in (["old", "new"] if k % 2 == 0 else ["new", "old"]):
                start = time.perf_counter()
                got[b].append(run_child(builds[b], part, job))
                print(f"{part} round {k + 1}/{rounds} {b}: {time.perf_counter() - start:.1f} s ({got[b][-1]['amrzip']})", file=sys.stderr)
        raw["parts"][part] = {"rounds": rounds, "repeat": repeat, **got}

    print(f"# AMR store: old = {builds['old']} against new = {builds['new']}, same run\n")
    print(f"Load average at start {' '.join(f'{v:.2f}' for v in load_start)}, {os.cpu_count()} cores.  Times: median of all "
          "runs, spread = min and max relative to it.  new/old: ratio of median throughputs (old time / new time), "
          "in brackets the min-max of the per-round ratios.\n")
    summary_rows = []
    if "demo" in parts:
        d = raw["parts"]["demo"]
        print(f"## make demo's AMR part: Nyx-like n={n} (boxes per level {d['new'][0]['boxes']}), rel {DEMO_REL:g}, "
              f"{d['rounds']} rounds x {d['repeat']} run per build\n")
        rows = []
        rounds = {b: [c["runs"] for c in d[b]] for b in ("old", "new")}
        sizes = {b: sizes_of([r for rs in rounds[b] for r in rs]) for b in ("old", "new")}
        orig = sizes["new"]["original"]
        if sizes["old"]["original"] != orig:
            print(f"warning: original bytes differ: old {sizes['old']['original']}, new {orig}\n")
        for b in ("old", "new"):
            runs = [r for rs in rounds[b] for r in rs]
            col = lambda k: [r[k] for r in runs]  # noqa: E731
            s = sizes[b]
            rows.append([b, f"{med(col('write')):.2f} ({spread(col('write'))})", f"{mbs(orig, col('write')):.2f}",
                         f"{med(col('demo_read')):.2f} ({spread(col('demo_read'))})",
                         f"{med(col('read_all')):.2f} ({spread(col('read_all'))})", f"{mbs(orig, col('read_all')):.1f}",
                         f"{1e3 * med(col('box')):.1f} ({spread(col('box'))})", kb(runs[0]["box_bytes"]),
                         kb(s["reported"]), kb(s["all_bytes"]), kb(s["du"]), str(s["nfiles"]),
                         f"{orig / s['reported']:.2f}", f"{orig / s['all_bytes']:.2f}", f"{orig / s['du']:.2f}",
                         f"{max(col('max_err_over_bound')):.3f}"])
        w, dr, ra, bx = (paired(rounds["old"], rounds["new"], k) for k in ("write", "demo_read", "read_all", "box"))
        rows.append(["new/old", fmt_ratio(w), "", fmt_ratio(dr), fmt_ratio(ra), "", fmt_ratio(bx), "",
                     f"{sizes['new']['reported'] / sizes['old']['reported']:.3f}", f"{sizes['new']['all_bytes'] / sizes['old']['all_bytes']:.3f}",
                     f"{sizes['new']['du'] / sizes['old']['du']:.3f}", "", "", "", "", ""])
        print(markdown_table(["build", "write s", "write MB/s", "demo read s", "read all s", "read all MB/s", "one box ms",
                              "box kB read", "reported kB", "all bytes kB", "du kB", "files", "orig/reported",
                              "orig/all", "orig/du", "max err/eb"], rows))
        cpu_keys = ("cpu_write", "cpu_demo_read", "cpu_read_all")
        cpu_rows = [[b, *(f"{med([r[k] for rs in rounds[b] for r in rs]):.2f}" for k in cpu_keys)] for b in ("old", "new")]
        cpu_rows.append(["new/old", *(fmt_ratio(paired(rounds["old"], rounds["new"], k)) for k in cpu_keys)])
        print("\nCPU time of the process (all its threads), less disturbed by other jobs than wall time; new/old as above "
              "(old CPU s / new CPU s, > 1: new does less work):\n")
        print(markdown_table(["build", "write CPU s", "demo read CPU s", "read all CPU s"], cpu_rows))
        print(f"\noriginal {orig / 1e6:.1f} MB.  demo read = amr_demo.measure (every box of every field and the leaf metrics), "
              "as the demo times it; read all = fresh open, every box of every level and field; one box = fresh open, "
              "the demo's box of density on the finest level.  The new/old row's time columns are throughput ratios "
              "(> 1: new faster), its size columns new/old bytes.\n")
        summary_rows.append(["demo (Nyx-like, rel 1e-4)", fmt_ratio(w), fmt_ratio(dr), fmt_ratio(ra), fmt_ratio(bx),
                             f"{sizes['new']['all_bytes'] / sizes['old']['all_bytes']:.3f}", f"{sizes['new']['du'] / sizes['old']['du']:.3f}"])
    if "files" in parts:
        d = raw["parts"]["files"]
        also = "".join(f" and the Nyx-like {k}" for k, on in (("plotfile", args.plotfile), ("Chombo file", args.chombo)) if on)
        print(f"## Real files (../shared/data){also}, {args.mode} preset, {d['rounds']} rounds x {d['repeat']} runs per build\n")
        errors = {b: {k: c["error"] for k, c in d[b][0]["cases"].items() if "error" in c} for b in ("old", "new")}
        cases = [k for k in d["new"][0]["cases"] if k in d["old"][0]["cases"] and "error" not in d["new"][0]["cases"][k]
                 and "error" not in d["old"][0]["cases"][k]]
        trows, srows = [], []
        agg = {k: [] for k in ("write", "read_all", "box")}
        cpu_agg = {"cpu_write": [], "cpu_read_all": []}
        tot = {b: {"original": 0, "all_bytes": 0, "du": 0, "nfiles": 0} for b in ("old", "new")}
        for case in cases:
            info = d["new"][0]["cases"][case]
            label = f"{info['file'].split('/')[-1]} ({info['levels']}L {info['fields']}f {info['boxes']}b)"
            rounds = {b: [c["cases"][case]["runs"] for c in d[b]] for b in ("old", "new")}
            sizes = {b: sizes_of([r for rs in rounds[b] for r in rs]) for b in ("old", "new")}
            orig = sizes["new"]["original"]
            times = {b: {k: [r[k] for rs in rounds[b] for r in rs] for k in agg} for b in ("old", "new")}
            ratios = {k: paired(rounds["old"], rounds["new"], k) for k in agg}
            for k in ("cpu_write", "cpu_read_all"):
                cpu_agg[k].append(paired(rounds["old"], rounds["new"], k)[0])
            for k in agg:
                agg[k].append(ratios[k][0])
            trows.append([label, f"{info['rel']:g}",
                          *(f"{mbs(orig, times[b]['write']):.2f} ({spread(times[b]['write'])})" for b in ("old", "new")), fmt_ratio(ratios["write"]),
                          *(f"{mbs(orig, times[b]['read_all']):.1f} ({spread(times[b]['read_all'])})" for b in ("old", "new")), fmt_ratio(ratios["read_all"]),
                          *(f"{1e3 * med(times[b]['box']):.2f} ({spread(times[b]['box'])})" for b in ("old", "new")), fmt_ratio(ratios["box"])])
            so, sn = sizes["old"], sizes["new"]
            for b in ("old", "new"):
                for k in tot[b]:
                    tot[b][k] += sizes[b][k]
            srows.append([label, f"{info['rel']:g}", kb(orig), kb(so["reported"]), kb(sn["reported"]), kb(so["all_bytes"]), kb(sn["all_bytes"]),
                          kb(so["du"]), kb(sn["du"]), str(so["nfiles"]), str(sn["nfiles"]),
                          f"{orig / so['all_bytes']:.2f}", f"{orig / sn['all_bytes']:.2f}", f"{orig / so['du']:.2f}", f"{orig / sn['du']:.2f}",
                          f"{sn['all_bytes'] / so['all_bytes']:.3f}", f"{sn['du'] / so['du']:.3f}"])
        print("### Time (original MB/s, median; one box: ms)\n")
        print(markdown_table(["file", "rel", "write old", "write new", "write new/old", "read all old", "read all new",
                              "read all new/old", "one box old ms", "one box new ms", "one box new/old"], trows))
        print("\n### Bytes (kB = 1000 bytes)\n")
        srows.append(["total", "", kb(tot["new"]["original"]), "", "", kb(tot["old"]["all_bytes"]), kb(tot["new"]["all_bytes"]),
                      kb(tot["old"]["du"]), kb(tot["new"]["du"]), str(tot["old"]["nfiles"]), str(tot["new"]["nfiles"]),
                      f"{tot['old']['original'] / tot['old']['all_bytes']:.2f}", f"{tot['new']['original'] / tot['new']['all_bytes']:.2f}",
                      f"{tot['old']['original'] / tot['old']['du']:.2f}", f"{tot['new']['original'] / tot['new']['du']:.2f}",
                      f"{tot['new']['all_bytes'] / tot['old']['all_bytes']:.3f}", f"{tot['new']['du'] / tot['old']['du']:.3f}"])
        print(markdown_table(["file", "rel", "original", "reported old", "reported new", "all bytes old", "all bytes new",
                              "du old", "du new", "files old", "files new", "orig/all old", "orig/all new", "orig/du old",
                              "orig/du new", "all bytes new/old", "du new/old"], srows))
        print("\nreported: the summary's stored_bytes (old: chunk payload and shared tables; new: the snapshot file); all bytes: "
              "every file under the store's path; du: allocated blocks, folders included.  read all: fresh open, every box "
              "of every level and field; one box: fresh open, middle box of the finest level, first field.")
        for b in ("old", "new"):
            for k, e in errors[b].items():
                print(f"- {b} build does not read {k}: {e}")
        print()
        summary_rows.append([f"real files{also}, geomean of {len(cases)} cases", f"{geomean(agg['write']):.2f} "
                             f"({min(agg['write']):.2f}-{max(agg['write']):.2f})", "",
                             f"{geomean(agg['read_all']):.2f} ({min(agg['read_all']):.2f}-{max(agg['read_all']):.2f})",
                             f"{geomean(agg['box']):.2f} ({min(agg['box']):.2f}-{max(agg['box']):.2f})",
                             f"{tot['new']['all_bytes'] / tot['old']['all_bytes']:.3f} (total)", f"{tot['new']['du'] / tot['old']['du']:.3f} (total)"])
        print(f"CPU time of the process (all threads), new/old as old CPU s / new CPU s, geomean over the cases (min-max): "
              f"write {geomean(cpu_agg['cpu_write']):.2f} ({min(cpu_agg['cpu_write']):.2f}-{max(cpu_agg['cpu_write']):.2f}), "
              f"read all {geomean(cpu_agg['cpu_read_all']):.2f} ({min(cpu_agg['cpu_read_all']):.2f}-{max(cpu_agg['cpu_read_all']):.2f}).\n")
    print("## Summary: new/old\n")
    print(markdown_table(["what", "write throughput", "demo read throughput", "read all throughput", "one box throughput",
                          "all bytes", "du"], summary_rows))
    print("\nThroughput ratios > 1: new faster (demo: in brackets the per-round min-max; files: geomean over the cases, in brackets "
          f"the min-max of the cases).  Bytes ratios < 1: new smaller.  {time.perf_counter() - t0:.0f} s, load average at end "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}.")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(raw))
    return 0


if __name__ == "__main__":
    sys.exit(main())
