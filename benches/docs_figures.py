"""The documentation site's figures, made by the same code as the benchmarks (``make docs`` runs it).

    .venv/bin/python benches/docs_figures.py docs/img

- ``tutorial-slice.svg``, ``tutorial-error.svg``, ``tutorial-rd.svg``: the tutorial's plotfile
  (the shared PeleLMeX file when ../shared/data is beside the project, else the built-in
  Nyx-like hierarchy) written into a store at rel 1e-4: a slice with box outlines, the error map,
  and the rate-distortion curve against per-box SZ3 and AMReX's 1-D baseline
  (``amrzip.plot``, as ``benches/amr_bench.py`` measures them).
- ``staging-placement.svg``: data-server load (max/avg) against the number of servers for
  Algorithm 1 and the Hilbert baseline (``benches/staging_bench.py``'s placement section) on a
  simulated growing run of 50 steps.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import datasets  # noqa: E402

import amrzip  # noqa: E402
from amrzip import plot  # noqa: E402
from amrzip.amr import synthetic  # noqa: E402

REL = 1e-4


def tutorial_source():
    """(label, hierarchy, field) of the tutorial's file."""
    path = datasets.REAL_DATA_DIR / "amrex" / "pelelmex_3d"
    if (path / "Header").is_file():
        return "pelelmex_3d", amrzip.read(path), "temp"
    return "Nyx-like (built in)", synthetic.nyx_like(), "density"


def tutorial(out: Path):
    label, h, field = tutorial_source()
    with tempfile.TemporaryDirectory() as tmp:
        amrzip.write(h.only([field]), f"{tmp}/run", rel=REL)
        ds = amrzip.open(f"{tmp}/run")
        plot.plot_slice(ds, field).savefig(out / "tutorial-slice.svg")
        plot.plot_error(ds, h, field).savefig(out / "tutorial-error.svg")
    curves = plot.rate_distortion(h, field, (1e-2, 1e-3, 1e-4, 1e-5))
    plot.plot_rate_distortion(curves, f"{field} of {label}").savefig(out / "tutorial-rd.svg")
    print(f"tutorial figures: {label}, field {field}")


def placement(out: Path):
    import numpy as np
    from matplotlib.figure import Figure

    import staging_bench as sb

    servers = [4, 16, 64, 256, 1024, 4096]
    sets = [sb.growth_set(50, 256)]  # the real files' sets are not drawn: not read either
    _, records = sb.placement(sets, servers)
    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    ax = fig.add_subplot()
    for key, name in [("batched", "Algorithm 1 (least-loaded node, then server)"), ("hilbert", "Hilbert curve (DataSpaces-style)")]:
        ax.plot(servers, [r[key] for r in records], marker="o", label=name)
    ax.plot(servers, [1 + r["largest_over_avg"] for r in records], linestyle=":", color="grey", label="1 + largest box / average")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("data servers")
    ax.set_ylabel("busiest server's load / average")
    ax.set_title(f"{sets[0].name}: {len(sets[0])} boxes")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.savefig(out / "staging-placement.svg")
    print(f"placement figure: Algorithm 1 {np.round([r['batched'] for r in records], 3).tolist()}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", type=Path)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tutorial(args.out)
    placement(args.out)


if __name__ == "__main__":
    main()
