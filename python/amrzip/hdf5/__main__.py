"""`python -m amrzip.hdf5`: where the plugin is, and filter arguments for the HDF5 tools.

    HDF5_PLUGIN_PATH=$(python -m amrzip.hdf5 --plugin-path) h5dump out.h5
    h5repack -f "$(python -m amrzip.hdf5 --abs 1e-3)" in.h5 out.h5
"""

import argparse
import sys

from amrzip.codec import MODES

from amrzip.hdf5 import FILTER_ID, cd_values, h5repack_filter, plugin_path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m amrzip.hdf5", description=__doc__.splitlines()[0])
    parser.add_argument("--plugin-path", action="store_true", help="print the folder to put in HDF5_PLUGIN_PATH")
    bound = parser.add_mutually_exclusive_group()
    for name in ("abs", "rel", "ratio", "psnr"):
        bound.add_argument(f"--{name}", type=float, help=f"error bound as for amrzip.compress({name}=...)")
    parser.add_argument("--mode", choices=MODES, default="ratio")
    parser.add_argument("--valid", type=int, help="slabs of the chunk's first dimension that hold data")
    parser.add_argument("--cd-values", action="store_true", help="print the filter id and cd_values instead of h5repack's -f argument")
    args = parser.parse_args(argv)
    if args.plugin_path:
        print(plugin_path())
        return 0
    given = {k: getattr(args, k) for k in ("abs", "rel", "ratio", "psnr") if getattr(args, k) is not None}
    if not given:
        parser.error("give --plugin-path or one of --abs, --rel, --ratio, --psnr")
    try:
        if args.cd_values:
            print(FILTER_ID, *cd_values(**given, mode=args.mode, valid=args.valid))
        else:
            print(h5repack_filter(**given, mode=args.mode, valid=args.valid))
    except ValueError as e:
        parser.error(str(e))
    return 0


if __name__ == "__main__":
    sys.exit(main())
