"""A simulation hands its AMR boxes to an analysis through a staging service, compressed in
transit; the analysis asks for a region across every level.

    .venv/bin/python examples/python/staging.py

The example starts its own service (one metadata server and four data servers on 127.0.0.1)
and stops it at the end. See docs/staging.md for running the servers in another terminal or on
other machines.
"""

import numpy as np

from amrzip.amr import synthetic
from amrzip.stage import LocalService

h = synthetic.small("nyx")  # a small Nyx-like snapshot: 3 levels, refinement ratio 2
ratios = [h.level(L).ref_ratios for L in range(h.num_levels - 1)]

with LocalService(dservers=4, nodes=2) as service, service.client() as sim:
    # The simulation side: every box of every level, density only, within 1e-4 of the range.
    for L in range(h.num_levels):
        level = h.level(L)
        sent = sim.put_many(((0, L, box, level.box_data("density", i)) for i, box in enumerate(level.boxes)),
                            compress={"rel": 1e-4})
        print(f"level {L}: {level.num_boxes} boxes, {sent['raw'] / 1e6:.2f} MB sent as {sent['sent'] / 1e6:.2f} MB")
    stats = sim.index(0, ref_ratio=ratios)
    print(f"index: {stats['levels']} boxes per level, {stats['edges']} refinement edges")

    # The analysis side: another client, as another program would be.
    with service.client() as analysis:
        region = ((8, 8, 8), (15, 15, 15))  # level-0 cells
        found = analysis.query(0, region, fetch=True)
        for L in range(h.num_levels):
            mine = [b for b in found if b.level == L]
            cells = sum(b.array.size for b in mine)
            print(f"region {region}: level {L}: {len(mine)} boxes, {cells} cells")
        for s in analysis.status():
            loads = [d["load"] for d in s["dservers"]]
            print(f"data server loads (bytes): {loads}, max/avg {max(loads) / np.mean(loads):.2f}")
