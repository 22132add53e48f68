"""Peak memory of amrzip's AMR writes and reads, against the raw size of the largest (level, field) array.

    .venv/bin/python benches/memory_bench.py                      # every dataset of amr_bench, and nyx-large
    .venv/bin/python benches/memory_bench.py --datasets nyx,nyx-large --threads 1 --json out.json

Each measurement runs in a process of its own (Linux only: it reads /proc/self/status).  The process loads the
dataset (amr_bench's loaders; ``nyx-large`` is the Nyx-like generator at 128^3 on level 0, density and temp, whose
largest (level, field) is 58 MB), makes every box an in-memory array, and notes its resident size: the baseline, what a
simulation holds before it writes.  It then writes the whole hierarchy with amrzip.write three times (all fields, the
writer's defaults, the given mode and rel bound), resetting the peak resident size (/proc/self/clear_refs) before each.
"Extra" is a write's peak minus the baseline: what the write held on top of the hierarchy, counting what the process
kept from the writes before it.  The first write also pays once per process for loading the compressor's code (the
file-backed pages it touches, reported apart) and for the allocator's first arenas; the later writes show what a
simulation that writes snapshot after snapshot pays each time.  A writer that works one (level, field) at a time
needs about that array's raw size, plus what it codes it into.  The numbers include what the allocator keeps of freed
memory.  Then, peak reset again, the process opens the last snapshot and reads every box of every field (each dropped
once read); the read's extra is its peak minus the resident size just before it.

Each process times its writes and, after two reads, takes the fastest: the table of times compares each thread count
with one thread.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import markdown_table  # noqa: E402

MB = 1e6


def _status(key: str) -> int:
    """A /proc/self/status field, in bytes."""
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def _reset_peak() -> int:
    """Resets the peak resident size to the current one; returns it."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status("VmRSS")


def _large_nyx():
    from amrzip.amr import synthetic

    return synthetic.nyx_like(n=128).only(["density", "temp"])


def measure(dataset: str, mode: str, rel: float, threads: int) -> dict:
    """One measurement, in this process (see the module's docstring)."""
    import dataclasses

    import numpy as np

    import amr_bench as ab
    import amrzip

    h = _large_nyx() if dataset == "nyx-large" else ab.DATASETS[dataset][1](False)
    arrays = {(L, f): [np.array(lev.box_data(f, i)) for i in range(lev.num_boxes)]
              for L, lev in enumerate(h.levels) for f in h.fields}
    levels = [dataclasses.replace(lev, loader=lambda f, i, L=L: arrays[(L, f)][i]) for L, lev in enumerate(h.levels)]
    h = dataclasses.replace(h, levels=levels)
    sizes = {key: sum(a.nbytes for a in boxes) for key, boxes in arrays.items()}
    write_times, read_times, write_extra = [], [], []
    with tempfile.TemporaryDirectory(prefix="memory_bench_") as tmp:
        baseline = _reset_peak()
        code = _status("RssFile")
        for k in range(3):
            store = os.path.join(tmp, f"store{k}")
            _reset_peak()
            t0 = time.perf_counter()
            amrzip.write(h, store, rel=rel, mode=mode, threads=threads)
            write_times.append(time.perf_counter() - t0)
            write_extra.append(_status("VmHWM") - baseline)
            if k == 0:
                code = _status("RssFile") - code
        for k in range(2):
            before = _reset_peak()
            t0 = time.perf_counter()
            back = amrzip.open(store, threads=threads).to_hierarchy()
            total = sum(back.level(L).box_data(f, i).nbytes for L in range(back.num_levels) for f in back.fields
                        for i in range(back.level(L).num_boxes))
            read_times.append(time.perf_counter() - t0)
            if k == 0:
                read_extra = _status("VmHWM") - before
    largest = max(sizes.values())
    later = max(write_extra[1:])
    return {"dataset": dataset, "mode": mode, "rel": rel, "threads": threads, "total_bytes": sum(sizes.values()),
            "largest_bytes": largest, "first_write_extra": write_extra[0], "first_write_code": code,
            "write_extra": later, "read_extra": read_extra, "read_bytes": total,
            "first_write_over_largest": write_extra[0] / largest, "write_over_largest": later / largest,
            "read_over_largest": read_extra / largest, "write_seconds": min(write_times), "read_seconds": min(read_times)}


def main() -> None:
    import amr_bench as ab

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    known = [*ab.DATASETS, "nyx-large"]
    p.add_argument("--datasets", default=",".join(known), help=f"comma list of {', '.join(known)}")
    p.add_argument("--modes", default="ratio,speed")
    p.add_argument("--rel", type=float, default=1e-4)
    p.add_argument("--threads", default=f"1,{os.cpu_count()}", help="comma list of thread counts")
    p.add_argument("--json", help="write the measurements to this path")
    p.add_argument("--one", help=argparse.SUPPRESS)  # dataset:mode:rel:threads, run in a child process
    a = p.parse_args()
    if a.one:
        d, mode, rel, threads = a.one.split(":")
        print(json.dumps(measure(d, mode, float(rel), int(threads))))
        return
    if not Path("/proc/self/clear_refs").exists():
        sys.exit("memory_bench needs Linux's /proc/self/clear_refs to reset the peak resident size")
    runs = []
    for d in a.datasets.split(","):
        for mode in a.modes.split(","):
            for t in sorted({int(v) for v in a.threads.split(",")}):
                out = subprocess.run([sys.executable, __file__, "--one", f"{d}:{mode}:{a.rel}:{t}"],
                                     capture_output=True, text=True)
                if out.returncode != 0:
                    print(f"{d} {mode} threads {t}: FAILED\n{out.stderr[-2000:]}", file=sys.stderr)
                    continue
                runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(f"{d} {mode} threads {t}: done", file=sys.stderr)
    rows = [[r["dataset"], r["mode"], str(r["threads"]), f"{r['total_bytes'] / MB:.1f}", f"{r['largest_bytes'] / MB:.1f}",
             f"{r['first_write_extra'] / MB:.1f} ({r['first_write_code'] / MB:.1f})", f"{r['first_write_over_largest']:.2f}",
             f"{r['write_extra'] / MB:.1f}", f"{r['write_over_largest']:.2f}", f"{r['read_extra'] / MB:.1f}",
             f"{r['read_over_largest']:.2f}"] for r in runs]
    print(f"# Peak memory of a whole-hierarchy write and read (rel {a.rel:g}, all fields)\n")
    print(markdown_table(["dataset", "mode", "threads", "hierarchy MB", "largest (level, field) MB",
                          "first write: extra MB (code)", "/ largest", "later writes: extra MB", "/ largest",
                          "read extra MB", "read / largest"], rows))
    one = {(r["dataset"], r["mode"]): r for r in runs if r["threads"] == 1}
    rows = []
    for r in runs:
        base = one.get((r["dataset"], r["mode"]))
        speedup = lambda key: f"{base[key] / r[key]:.2f}x" if base else "-"  # noqa: E731
        rows.append([r["dataset"], r["mode"], str(r["threads"]), f"{r['total_bytes'] / MB / r['write_seconds']:.1f}",
                     f"{r['write_seconds']:.3f}", speedup("write_seconds"), f"{r['read_seconds']:.3f}", speedup("read_seconds")])
    print("\n# Whole-hierarchy write and read times (fastest of three writes, two reads), against one thread\n")
    print(markdown_table(["dataset", "mode", "threads", "write MB/s", "write s", "write vs 1 thread", "read s",
                          "read vs 1 thread"], rows))
    if a.json:
        Path(a.json).write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
