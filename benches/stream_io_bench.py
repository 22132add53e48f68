"""Chunked-stream I/O throughput: amrzip.StreamCompressor writing and amrzip.StreamDecompressor reading the 256^3
float32 smooth3d field (datasets.py) in 16 chunks of 16 x 256 x 256, to and from memory and a file.

    .venv/bin/python benches/stream_io_bench.py                    # this build
    .venv/bin/python benches/stream_io_bench.py --baseline DIR     # against the package in DIR/amrzip, same run

With --baseline, each build runs in processes of its own (one import each), the builds taking turns for --rounds
rounds, so that both see the same machine; every process times --repeat runs of each case.  Throughput is input
bytes (uncompressed) per second over the median run (--stat min: the fastest, steadier when other jobs share the
cores); with --clock cpu, per second of CPU time of the process (all its threads), which other jobs on the machine
disturb far less than wall-clock time.  The streams the builds write must be byte-identical.  Writing a file includes
its fsync and rename.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


BENCH_DIR = Path(__file__).resolve().parent
ROWS = 16  # 256 / 16 = 16 chunks
REL = 1e-4  # the bound: abs = REL x the field's value range
CASES = ["write memory", "read memory", "write file", "read file"]
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def child(repeat: int, threads: int | None, clock) -> dict:
    """Times every case in this process, with whichever amrzip it imports."""
    sys.path.insert(0, str(BENCH_DIR))
    import datasets

    import amrzip

    field = datasets.load("smooth3d")
    eb = REL * float(field.max() - field.min())
    chunk = (ROWS, *field.shape[1:])
    times = {case: [] for case in CASES}
    with tempfile.TemporaryDirectory(prefix="stream_io_bench_") as tmp:
        path = Path(tmp) / "s.amrzs"

        def write(output=None):
            c = amrzip.StreamCompressor(field.dtype, chunk, abs=eb, threads=threads, output=output)
            c.write(field)
            return c.finish()

        def read(source):
            return sum(c.size for c in amrzip.StreamDecompressor(source, threads=threads))

        blob = write()
        for _ in range(repeat):
            for case, run in (("write memory", write), ("read memory", lambda: read(blob)),
                              ("write file", lambda: write(path)), ("read file", lambda: read(path))):
                start = clock()
                run()
                times[case].append(clock() - start)
        assert path.read_bytes() == blob and read(blob) == field.size
    return {"amrzip": str(Path(amrzip.__file__).parent), "nbytes": field.nbytes, "stream_bytes": len(blob),
            "sha256": hashlib.sha256(blob).hexdigest(), "times": times}


def run_child(pythonpath: str | None, repeat: int, threads: int | None, clock: str) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    args = [sys.executable, __file__, "--child", "--repeat", str(repeat), "--clock", clock] + (["--threads", str(threads)] if threads else [])
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline", type=Path, help="a folder holding another build of the package (DIR/amrzip)")
    p.add_argument("--rounds", type=int, default=3, help="processes per build, taking turns (default 3)")
    p.add_argument("--repeat", type=int, default=3, help="timed runs of each case per process (default 3)")
    p.add_argument("--threads", type=int, help="codec threads (default: all cores)")
    p.add_argument("--stat", choices=["median", "min"], default="median", help="how the runs of a case are reduced")
    p.add_argument("--clock", choices=list(CLOCKS), default="wall", help="wall-clock time, or CPU time of the process")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.repeat, args.threads, CLOCKS[args.clock])))
        return 0

    builds = {"this build": None} if args.baseline is None else {"baseline": str(args.baseline.resolve()), "this build": None}
    runs = {name: [] for name in builds}
    for k in range(args.rounds):
        # Each build goes first every other round: neither always finds the caches of the other.
        for name, pythonpath in list(builds.items())[:: 1 if k % 2 == 0 else -1]:
            runs[name].append(run_child(pythonpath, args.repeat, args.threads, args.clock))
    reduce = min if args.stat == "min" else statistics.median
    results = {}
    for name, rs in runs.items():
        first = rs[0]
        results[name] = {case: first["nbytes"] / 1e6 / reduce([t for r in rs for t in r["times"][case]]) for case in CASES}
        print(f"{name}: {first['amrzip']}, stream of {first['stream_bytes']} bytes (ratio {first['nbytes'] / first['stream_bytes']:.1f})",
              file=sys.stderr)
    hashes = {r["sha256"] for rs in runs.values() for r in rs}
    print(f"# chunked-stream I/O: smooth3d 256^3 float32 in {256 // ROWS} chunks, abs = {REL:g} x range, threads "
          f"{args.threads or os.cpu_count()}, {args.stat} {args.clock} time of {args.rounds} x {args.repeat} runs per case, load average {os.getloadavg()[0]:.2f}\n")
    print("| build | " + " | ".join(f"{case} MB/s" for case in CASES) + " |")
    print("|---|" + "---|" * len(CASES))
    for name, r in results.items():
        print(f"| {name} | " + " | ".join(f"{r[case]:.1f}" for case in CASES) + " |")
    if len(results) == 2:
        print("| this build / baseline | " + " | ".join(f"{results['this build'][c] / results['baseline'][c]:.3f}" for c in CASES) + " |")
    print(f"\nstreams byte-identical across builds and runs: {'yes' if len(hashes) == 1 else 'NO'}")
    return 0 if len(hashes) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
