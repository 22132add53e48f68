"""The staging service (amrzip.stage) against its baselines, same run.

    .venv/bin/python benches/staging_bench.py [--servers 4,64,1024,4096] [--timesteps 50] [--growth 256]
        [--query-boxes 100000] [--queries 200] [--boxes 64] [--repeat 3] [--json OUT]

Sections (markdown tables on stdout):

A. Placement: data-server load (max/avg) after staging every box of a box set, by the AMRZone
   paper's Algorithm 1 (least-loaded node, then its least-loaded data server, 4 servers a node),
   boxes placed in arrival order or, as the metadata server does within one put_many request,
   largest first per timestep, against DataSpaces-style static placement (a Hilbert curve over the finest level's bounding
   box, cut into equal parts, each box's bytes split by overlap). Box sets: every real AMR file
   of ../shared/data, the Nyx-like and WarpX-like hierarchies, each staged as one snapshot and as
   --timesteps snapshots; and a simulated AMR run (--growth^3 coarse cells) whose refined regions
   grow and move over --timesteps steps. A box weighs its cells times its fields times 8 bytes.
   The last column, r, is the largest box over the average load: no placement of whole boxes
   can do better than max(1, r), and greedy placement guarantees at most about 1 + r, so it is
   close to 1 exactly when a server's share of the data is many times the largest box. Rows with fewer
   boxes than servers are left out of the table (some servers must stay empty), not of --json.
B. Queries: --query-boxes boxes over three levels; --queries random regions (1-10% of the domain
   per axis) answered by the polytree (Algorithm 2) and by a linear scan of every box, in the
   metadata server's catalog (what a query costs the server, without the network).
C. Throughput: a local service with 4 data servers on 127.0.0.1; --boxes boxes of 16 MiB put
   and got by one client (put_many/get_many), uncompressed and compressed (rel 1e-4, speed
   mode, on a turbulence field), and the Nyx-like hierarchy box by box. Effective bandwidth is
   raw bytes over time.
D. Faults: the time from kill -9 of a data server until a client's get of one of its boxes
   fails naming it (client timeout 2 s, health checks every 0.2 s, 1 s to be declared dead).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import datasets  # noqa: E402
from report import fmt, markdown_table  # noqa: E402

import amrzip  # noqa: E402
from amrzip import _core  # noqa: E402
from amrzip.amr import synthetic  # noqa: E402
from amrzip.stage import LocalService, StagingError  # noqa: E402

PER_NODE = 4


# ---- box sets: (timestep, level, lo, hi, bytes) rows, and the refinement ratios
class BoxSet:
    def __init__(self, name: str, ndim: int):
        self.name, self.ndim = name, ndim
        self.level, self.lo, self.hi, self.nbytes, self.timestep = [], [], [], [], []
        self.ratios: dict[int, list] = {}  # timestep -> per-level per-axis ratios

    def add(self, t: int, levels: list[list], ratios: list, weight: int):
        """levels[L]: boxes (lo, hi) of level L; weight: bytes per cell."""
        self.ratios[t] = [list(r) for r in ratios]
        for L, boxes in enumerate(levels):
            for lo, hi in boxes:
                self.timestep.append(t)
                self.level.append(L)
                self.lo.append(lo)
                self.hi.append(hi)
                self.nbytes.append(int(np.prod(np.subtract(hi, lo) + 1)) * weight)

    def arrays(self):
        return (np.array(self.timestep), np.array(self.level), np.array(self.lo, dtype=np.int64),
                np.array(self.hi, dtype=np.int64), np.array(self.nbytes, dtype=np.uint64))

    def __len__(self):
        return len(self.nbytes)


def hierarchy_levels(h):
    levels = [list(h.level(L).boxes) for L in range(h.num_levels)]
    ratios = [h.level(L).ref_ratios for L in range(h.num_levels - 1)]
    return levels, ratios, 8 * len(h.level(0).fields)


def growth_levels(t: int, steps: int, n: int = 128, seed: int = 0):
    """One step of a simulated AMR run in 3-D: a coarse 32^3-boxed domain of n^3 cells and two
    finer levels (ratio 2) refining blobs that grow and drift over the run, tiled by 8^3 (level 1)
    and 8^3 (level 2) and merged into boxes of up to 32 cells a side, as AMReX's grids."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0.2, 0.8, (6, 3))
    drift = rng.uniform(-0.15, 0.15, (6, 3))
    frac = t / max(steps - 1, 1)
    levels = [synthetic._chop((0, 0, 0), (n - 1,) * 3, 32)]
    for L, (radius0, growth) in enumerate([(0.06, 0.12), (0.03, 0.06)], start=1):
        cells = n * 2**L
        tiles = cells // 8
        x = (np.arange(tiles) + 0.5) / tiles
        mask = np.zeros((tiles,) * 3, dtype=bool)
        for c, d in zip(centres, drift):
            p = c + d * frac
            r = radius0 + growth * frac
            mask |= ((x[:, None, None] - p[0]) ** 2 + (x[None, :, None] - p[1]) ** 2 + (x[None, None, :] - p[2]) ** 2) < r * r
        levels.append(synthetic._tiles_to_boxes(mask, 8, 4))
    return levels, [(2, 2, 2), (2, 2, 2)]


def box_sets(timesteps: int, growth: int) -> list[BoxSet]:
    sources = []
    for label, kind, path in datasets.real_files():
        if kind != "skip":
            sources.append((label, amrzip.read(path)))
    sources.append(("nyx-like (make demo)", synthetic.nyx_like()))
    sources.append(("warpx-like", synthetic.warpx_like()))
    out = []
    for label, h in sources:
        levels, ratios, weight = hierarchy_levels(h)
        one = BoxSet(f"{label}, 1 snapshot", h.dim)
        one.add(0, levels, ratios, weight)
        many = BoxSet(f"{label}, {timesteps} snapshots", h.dim)
        for t in range(timesteps):
            many.add(t, levels, ratios, weight)
        out += [one, many]
    return out + [growth_set(timesteps, growth)]


def growth_set(timesteps: int, n: int) -> BoxSet:
    """The simulated growing run: every step's boxes, four fields of 8 bytes a cell."""
    grow = BoxSet(f"simulated growth {n}^3, {timesteps} steps", 3)
    for t in range(timesteps):
        levels, ratios = growth_levels(t, timesteps, n=n)
        grow.add(t, levels, ratios, 8 * 4)
    return grow


def hilbert_loads(s: BoxSet, nservers: int) -> np.ndarray:
    """DataSpaces-style: each timestep's boxes in its finest level's index space."""
    t, level, lo, hi, nbytes = s.arrays()
    total = np.zeros(nservers)
    for step in np.unique(t):
        sel = t == step
        ratios = s.ratios[int(step)]
        top = len(ratios)
        scale = np.ones((top + 1, s.ndim), dtype=np.int64)
        for L in range(top - 1, -1, -1):
            scale[L] = scale[L + 1] * np.array(ratios[L])
        f = scale[level[sel]]
        total += _core.staging_hilbert_loads(lo[sel] * f, (hi[sel] + 1) * f - 1, nbytes[sel].astype(np.float64), nservers)
    return total


def placement(sets: list[BoxSet], servers: list[int]) -> tuple[str, list]:
    rows, records = [], []
    for s in sets:
        t, _, _, _, nbytes = s.arrays()
        # What the metadata server does with a timestep put in one put_many: largest first.
        batched = nbytes[np.lexsort((-nbytes.astype(np.int64), t))]
        for n in servers:
            nodes = [PER_NODE] * (n // PER_NODE) + ([n % PER_NODE] if n % PER_NODE else [])
            arrival = _core.staging_simulate_placement(nodes, nbytes).astype(np.float64)
            ours = _core.staging_simulate_placement(nodes, batched).astype(np.float64)
            base = hilbert_loads(s, n)
            a, b, c = arrival.max() / arrival.mean(), ours.max() / ours.mean(), base.max() / base.mean()
            # r: no placement of whole boxes loads its busiest server below max(1, r) times the
            # average, and greedy placement stays below 1 + r.
            r = float(nbytes.max()) / ours.mean()
            if len(s) >= n:  # with fewer boxes than servers some servers stay empty, whatever the placement
                rows.append([s.name, str(len(s)), str(n), f"{len(s) / n:.1f}", fmt(a, ".3f"), fmt(b, ".3f"), fmt(c, ".2f"),
                             fmt(r, ".3f")])
            records.append({"set": s.name, "boxes": len(s), "servers": n, "arrival": a, "batched": b, "hilbert": c,
                            "largest_over_avg": r})
    header = ["box set", "boxes", "servers", "boxes/server", "Algorithm 1, box by box", "Algorithm 1, a put_many per step",
              "Hilbert", "largest box / avg (r)"]
    return markdown_table(header, rows), records


# ---- queries
def query_set(target: int) -> BoxSet:
    """At least ``target`` boxes over three levels: the growth generator on a domain grown until
    it has that many (the count grows about as the cube of the domain's side)."""
    n = 128
    while True:
        levels, ratios = growth_levels(40, 50, n=n, seed=1)
        count = sum(map(len, levels))
        if count >= target:
            s = BoxSet(f"{count} boxes", 3)
            s.add(0, levels, ratios, 8)
            return s
        n = max(n + 32, int(n * (target / count) ** (1 / 3)) // 32 * 32)


def queries(s: BoxSet, count: int, repeat: int) -> tuple[str, dict]:
    t, level, lo, hi, nbytes = s.arrays()
    cat = _core.StagingCatalog()
    for i in range(4):
        cat.add_dserver(f"n{i}", f"tcp://127.0.0.1:{i + 1}", 0)
    start = time.perf_counter()
    for L, a, b, n in zip(level.tolist(), lo.tolist(), hi.tolist(), nbytes.tolist()):
        cat.place(0, L, a, b, n, b"")
        cat.commit(0, L, a, b)
    insert = time.perf_counter() - start
    build = cat.build_index(0, s.ratios[0], 0)
    domain = hi[level == 0].max(axis=0) + 1
    rng = np.random.default_rng(3)
    regions = []
    for _ in range(count):
        ext = np.maximum(1, (domain * rng.uniform(0.01, 0.10, 3)).astype(int))
        a = (rng.uniform(0, 1, 3) * (domain - ext)).astype(int)
        regions.append((a.tolist(), (a + ext - 1).tolist()))
    times = {}
    found = {}
    for method in ("polytree", "scan"):
        runs = []
        for _ in range(repeat):
            start = time.perf_counter()
            answers = [cat.query(0, a, b, 0, None, method, False) for a, b in regions]
            runs.append(time.perf_counter() - start)
        times[method] = statistics.median(runs) / count
        found[method] = answers
    same = all(
        np.array_equal(x["level"], y["level"]) and np.array_equal(x["lo"], y["lo"]) and np.array_equal(x["hi"], y["hi"])
        for x, y in zip(found["polytree"], found["scan"])
    )
    hits = statistics.mean(len(x["level"]) for x in found["polytree"])
    per_level = [int((level == L).sum()) for L in range(3)]
    rows = [[s.name, "/".join(map(str, per_level)), fmt(build["seconds"] * 1e3, ".1f"), fmt(hits, ".0f"),
             fmt(times["polytree"] * 1e6, ".1f"), fmt(times["scan"] * 1e6, ".1f"), fmt(times["scan"] / times["polytree"], ".1f"),
             "yes" if same else "NO"]]
    header = ["boxes", "per level", "index build ms", "boxes found (mean)", "polytree µs/query", "scan µs/query", "speedup",
              "same answers"]
    result = {"boxes": len(s), "insert_s": insert, "build_s": build["seconds"], "polytree_us": times["polytree"] * 1e6,
              "scan_us": times["scan"] * 1e6, "same": same, "regions": regions}
    return markdown_table(header, rows), result


# ---- throughput
def throughput(boxes: int, repeat: int) -> tuple[str, list]:
    rows, records = [], []
    field = datasets.load("turbulence3d")  # 256^3 float64: eight 128^3 boxes of 16 MiB
    pieces = [field[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128, k * 128:(k + 1) * 128]
              for i in range(2) for j in range(2) for k in range(2)]
    pieces = [np.ascontiguousarray(p) for p in pieces]
    with LocalService(4, lifetime=1800) as service, service.client(timeout=120) as c:
        for label, compress in [("uncompressed", None), ("compressed rel 1e-4, speed mode", {"rel": 1e-4, "mode": "speed"})]:
            items = [(1, 0, ((128 * i, 0, 0), (128 * i + 127, 127, 127)), pieces[i % 8]) for i in range(boxes)]
            raw = sum(a.nbytes for *_, a in items)
            puts, gets, sent = [], [], 0
            for _ in range(repeat):
                start = time.perf_counter()
                sent = c.put_many(items, compress=compress)["sent"]
                puts.append(time.perf_counter() - start)
                start = time.perf_counter()
                got = c.get_many([it[:3] for it in items])
                gets.append(time.perf_counter() - start)
                del got
                c.drop(1)
            tp, tg = statistics.median(puts), statistics.median(gets)
            rows.append([label, f"{boxes} x 16 MiB", fmt(raw / sent, ".2f"), fmt(raw / tp / 1e9, ".2f"), fmt(raw / tg / 1e9, ".2f"),
                         fmt(2 * raw / (tp + tg) / 1e9, ".2f")])
            records.append({"case": label, "put_GBps": raw / tp / 1e9, "get_GBps": raw / tg / 1e9, "ratio": raw / sent})
        h = synthetic.nyx_like()
        items = [(2, L, b, np.stack([h.level(L).box_data(f, i) for f in h.level(L).fields], axis=-1))
                 for L in range(h.num_levels) for i, b in enumerate(h.level(L).boxes)]
        raw = sum(a.nbytes for *_, a in items)
        puts, gets = [], []
        for _ in range(repeat):
            start = time.perf_counter()
            c.put_many(items)
            puts.append(time.perf_counter() - start)
            start = time.perf_counter()
            c.get_many([it[:3] for it in items])
            gets.append(time.perf_counter() - start)
            c.drop(2)
        tp, tg = statistics.median(puts), statistics.median(gets)
        rows.append(["Nyx-like hierarchy, all fields a box", f"{len(items)} boxes, {raw / 2**20:.0f} MiB", "1.00",
                     fmt(raw / tp / 1e9, ".2f"), fmt(raw / tg / 1e9, ".2f"), fmt(2 * raw / (tp + tg) / 1e9, ".2f")])
        records.append({"case": "nyx-like", "put_GBps": raw / tp / 1e9, "get_GBps": raw / tg / 1e9, "ratio": 1.0})
    header = ["payload", "boxes", "ratio", "put GB/s (effective)", "get GB/s (effective)", "put+get GB/s"]
    return markdown_table(header, rows), records


def faults() -> str:
    rows = []
    with LocalService(4, lifetime=600, heartbeat=0.2, timeout=1.0) as service, service.client(timeout=2.0) as c:
        items = [(0, 0, ((8 * i,), (8 * i + 7,)), np.full(8, float(i))) for i in range(16)]
        c.put_many(items)
        victim = next(d["id"] for d in c.status()[0]["dservers"] if d["address"] == service.dserver_addresses[0])
        c.index(0)
        lost = [b for b in c.query(0, ((0,), (127,))) if b.dserver == victim]
        os.kill(service.dserver_processes[0].pid, signal.SIGKILL)
        for label, wait in [("get right after kill -9", 0.0), ("get 1.5 s later (declared dead)", 1.5)]:
            time.sleep(wait)
            start = time.perf_counter()
            try:
                c.get(0, 0, lost[0].box)
                outcome = "NO ERROR"
            except StagingError as e:
                outcome = str(e)[:90]
            rows.append([label, fmt(time.perf_counter() - start, ".2f"), outcome])
        ok = all(np.array_equal(c.get(*it[:3]), it[3]) for it in items if it[2] not in {b.box for b in lost})
        rows.append(["boxes on the other 3 servers", "-", "all read back equal" if ok else "WRONG"])
    return markdown_table(["event", "seconds", "what the client got"], rows)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--servers", default="4,64,1024,4096")
    p.add_argument("--timesteps", type=int, default=50)
    p.add_argument("--growth", type=int, default=256, help="coarse cells per axis of the simulated growing run")
    p.add_argument("--query-boxes", type=int, default=100_000)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--boxes", type=int, default=64)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    out = {}
    print("## A. Placement: data-server load, max / average\n")
    table, out["placement"] = placement(box_sets(args.timesteps, args.growth), [int(v) for v in args.servers.split(",")])
    print(table, "\n", flush=True)
    print("## B. Spatial queries: polytree against a linear scan\n")
    table, out["queries"] = queries(query_set(args.query_boxes), args.queries, args.repeat)
    print(table, "\n", flush=True)
    print("## C. Throughput on 127.0.0.1, 4 data servers, one client\n")
    table, out["throughput"] = throughput(args.boxes, args.repeat)
    print(table, "\n", flush=True)
    print("## D. A data server killed\n")
    print(faults(), "\n", flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
