"""The ``amrzip`` command: compress, decompress and inspect arrays stored as raw binary or .npy;
convert AMR snapshots (AMReX plotfiles, AMReX HDF5, Chombo HDF5) into a snapshot store, inspect
the store and extract regions or whole snapshots from it; print the flags that build C and C++
programs against the amrzip C library (``amrzip config``).

Exit status: 0 success, 1 bad data (corrupt stream or store, unreadable or truncated file,
failed --verify, existing snapshot), 2 bad usage (options, missing input, file size not
matching --dtype/--shape, unknown field, level or snapshot), 130 interrupted.
Errors are reported as one ``amrzip: error: ...`` line on stderr.
"""

from __future__ import annotations

import json
import math
import sys
import time
import warnings
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path

import click
import numpy as np
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

import amrzip
from amrzip import _arrayfile, amr_demo, baselines, capi, demo, multires, parallel, plot, streaming
from amrzip._metrics import max_abs_error, psnr
from amrzip.amr.hierarchy import box_shape
from amrzip.codec import MODES, RATIO_WARN
from amrzip.multires import MultiresDataset, export_idx, levels_dropped
from amrzip.stage import commands as stage_commands
from amrzip.store import check_snapshot_name
from amrzip.store import snapshots as store_snapshots
from amrzip.store.dataset import COVERED

# Runs on smaller inputs finish in about a second; a spinner would only flicker.
PROGRESS_MIN_BYTES = 64 * 2**20

_input_path = click.Path(exists=True, dir_okay=False, path_type=Path)
_output_path = click.Path(dir_okay=False, writable=True, path_type=Path)
_threads_option = click.option("--threads", type=click.IntRange(min=1), help="Worker threads [default: all cores].")
_force_option = click.option("-f", "--force", is_flag=True, help="Overwrite OUTPUT if it exists.")


def _size(n: float) -> str:
    """Decimal units, matching the MB/s figures."""
    unit = 0
    while n >= 1000 and unit < 4:
        n, unit = n / 1000, unit + 1
    return f"{n:.0f} B" if unit == 0 else f"{n:.1f} {'kMGT'[unit - 1]}B"


def _plural(n: int, what: str) -> str:
    return f"{n} {what}{'s' * (n != 1)}"


def _rate(nbytes: int, seconds: float) -> str:
    return f"{nbytes / 1e6 / seconds:.0f} MB/s" if seconds > 0 else "- MB/s"


def _parse_shape(ctx, param, value):
    if value is None:
        return None
    try:
        shape = tuple(int(d) for d in value.replace("x", ",").split(","))
    except ValueError:
        raise click.BadParameter(f"expected sizes separated by commas, such as 256,256,256; got {value!r}") from None
    if not 1 <= len(shape) <= 4 or min(shape) < 0:
        raise click.BadParameter(f"expected 1 to 4 sizes >= 0; got {value!r}")
    return shape


def _check_at_least(floor: float, inclusive: bool = True):
    """A callback accepting finite numbers >= floor (> floor if not inclusive), the limits of amrzip.compress."""

    def check(ctx, param, value):
        if value is not None and not (math.isfinite(value) and (value >= floor if inclusive else value > floor)):
            raise click.BadParameter(f"must be a finite number {'>=' if inclusive else '>'} {floor:g}; got {value}")
        return value

    return check


_check_bound = _check_at_least(0)


def _describe_bound(i: dict, upper: float | None = None) -> str:
    """The bound as the user stated it, plus the absolute bound it became when it was not one
    (from abs_bound up to `upper` when the records of a chunked stream differ)."""
    text = f"{i['bound_mode']} {i['bound']:g}" + (" dB" if i["bound_mode"] == "psnr" else "")
    if i["bound_mode"] == "abs":
        return text
    span = f"{i['abs_bound']:.6g}" + (f" to {upper:.6g} by record" if upper is not None and upper != i["abs_bound"] else "")
    return f"{text} (abs {span})"


def _output(path: Path | None, input_path: Path, suffix: str, force: bool) -> Path:
    out = path if path is not None else input_path.with_suffix(suffix)
    if out.resolve() == input_path.resolve():
        raise click.UsageError(f"output {out} would overwrite the input")
    if out.exists() and not force:
        raise click.UsageError(f"{out} exists; pass --force to overwrite it")
    return out


@contextmanager
def _activity(description: str, nbytes: int):
    """A spinner with elapsed time on stderr while a large input is processed; nothing for small
    inputs or when stderr is not a terminal (logs, pipes)."""
    console = Console(stderr=True)
    if nbytes < PROGRESS_MIN_BYTES or not console.is_terminal:
        yield
        return
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        progress.add_task(description, total=None)
        yield


@contextmanager
def _progress(description: str, nbytes: int):
    """A bar of bytes done on stderr, shown under the same conditions as _activity's spinner.
    Yields the function to call with the bytes of each piece done."""
    console = Console(stderr=True)
    if nbytes < PROGRESS_MIN_BYTES or not console.is_terminal:
        yield lambda n: None
        return
    columns = (
        TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn()
    )
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(description, total=nbytes)
        yield lambda n: progress.advance(task, n)


def _timed(description: str, nbytes: int, fn):
    with _activity(description, nbytes):
        start = time.perf_counter()
        result = fn()
        return result, time.perf_counter() - start


def _read_input(path: Path, dtype, shape, byteorder):
    try:
        if _arrayfile.is_npy(path):
            return _arrayfile.read_npy(path, dtype, shape, byteorder)
        if dtype is None or shape is None:
            raise click.UsageError("a raw INPUT needs --dtype and --shape (or use a .npy file)")
        return _arrayfile.read_raw(path, dtype, shape, byteorder or "little")
    except _arrayfile.MismatchError as e:
        raise click.UsageError(str(e)) from None
    except _arrayfile.UnreadableError as e:
        raise click.ClickException(str(e)) from None


def _mapped_input(path: Path, dtype, shape, byteorder) -> np.ndarray:
    """INPUT for --chunk-mb: mapped in its own byte order and not read, so that slabs can be
    read (and converted) one at a time. Checked by _read_input, asked for native order so that
    it maps without converting."""
    native = sys.byteorder
    if _arrayfile.is_npy(path):
        try:
            peek = np.load(path, mmap_mode="r", allow_pickle=False)
        except Exception:  # not a readable .npy: _read_input says why
            peek = None
        if peek is not None and not peek.dtype.isnative:
            raise click.UsageError(f"{path}: --chunk-mb reads a .npy file in native byte order only; drop --chunk-mb")
        if peek is not None and peek.ndim > 1 and not peek.flags.c_contiguous:
            raise click.UsageError(f"{path}: --chunk-mb reads a C-order .npy file only; drop --chunk-mb")
        return _read_input(path, dtype, shape, byteorder)
    array = _read_input(path, dtype, shape, native)
    stored = _arrayfile.BYTEORDERS[byteorder or "little"]
    return array.view(array.dtype.newbyteorder(stored))


def _slab(array: np.ndarray, start: int, rows: int) -> np.ndarray:
    """Rows start..start+rows of a mapped input, mapped on their own: the pages of a map stay in
    the process's resident set until it is unmapped, so reading through one map of the whole
    input would grow it to the input's size."""
    if isinstance(array, np.memmap) and array.filename is not None:
        row_bytes = array.itemsize * math.prod(array.shape[1:])
        shape = (rows, *array.shape[1:])
        return np.memmap(array.filename, dtype=array.dtype, mode="r", offset=array.offset + start * row_bytes, shape=shape)
    return array[start : start + rows]  # empty inputs, which are not mapped


def _finite_range(array: np.ndarray, rows: int, advance) -> float:
    """max - min of the finite values (0 if there are none), reading one slab at a time."""
    lo, hi = math.inf, -math.inf
    for start in range(0, array.shape[0], rows):
        slab = _slab(array, start, min(rows, array.shape[0] - start))
        a, b = float(slab.min(initial=math.inf)), float(slab.max(initial=-math.inf))
        if not (math.isfinite(a) and math.isfinite(b)):  # NaN or infinities: look at the rest only
            finite = slab[np.isfinite(slab)]
            a, b = float(finite.min(initial=math.inf)), float(finite.max(initial=-math.inf))
        lo, hi = min(lo, a), max(hi, b)
        advance(slab.nbytes)
    return hi - lo if hi >= lo else 0.0


def _chunked(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(len(streaming.MAGIC)) == streaming.MAGIC


def _describe_chunked_bound(d: dict) -> str:
    if not d["records"]:
        return "-"
    lo, hi = d["abs_bound_range"]
    return _describe_bound({**d, "abs_bound": lo}, upper=hi)


def _corrupt(path: Path, error: Exception) -> click.ClickException:
    return click.ClickException(f"{path}: not a valid amrzip stream ({error})")


def _read_stream(path: Path) -> tuple[bytes, dict]:
    data = path.read_bytes()
    try:
        return data, amrzip.info(data)
    except amrzip.CorruptStreamError as e:
        raise _corrupt(path, e) from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="amrzip", prog_name="amrzip")
def cli():
    """Error-bounded lossy compression of float32/float64 arrays (raw binary or .npy) and of AMR
    snapshots (AMReX plotfiles, AMReX HDF5, Chombo HDF5) into a snapshot store."""


@cli.command()
@click.argument("input_path", metavar="INPUT", type=_input_path)
@click.option("-o", "--output", type=_output_path, help="Compressed stream [default: INPUT with suffix .amrz].")
@click.option("--dtype", type=click.Choice(list(_arrayfile.DTYPES)), help="Element type of a raw INPUT.")
@click.option("--shape", callback=_parse_shape, help="Shape of a raw INPUT in C order, e.g. 256,256,256.")
@click.option("--byteorder", type=click.Choice(list(_arrayfile.BYTEORDERS)), help="Byte order of a raw INPUT [default: little].")
@click.option("--abs", "abs_bound", type=float, callback=_check_bound, help="Absolute error bound.")
@click.option("--rel", "rel_bound", type=float, callback=_check_bound, help="Error bound as a fraction of the value range.")
@click.option(
    "--ratio", "ratio_target", type=float, callback=_check_at_least(1), help="Target compression ratio; the bound is searched for."
)
@click.option(
    "--psnr", "psnr_target", type=float, callback=_check_at_least(0, inclusive=False),
    help="Target PSNR in dB (peak = value range): the largest bound reaching it.",
)
@click.option("--mode", type=click.Choice(MODES), default="ratio", show_default=True, help="Optimise for ratio or for speed.")
@_threads_option
@click.option(
    "--chunk-mb", type=float, callback=_check_at_least(0, inclusive=False),
    help="Compress slab by slab along the first axis, about this many MiB of input per slab, into a "
    "chunked stream: memory stays bounded whatever the input size.",
)
@click.option("--verify", is_flag=True, help="Decompress the result and check the error bound (and a --psnr target).")
@_force_option
def compress(
    input_path, output, dtype, shape, byteorder, abs_bound, rel_bound, ratio_target, psnr_target, mode, threads, chunk_mb, verify,
    force,
):
    """Compress INPUT (.npy, or raw binary described by --dtype and --shape) under an error bound
    given by exactly one of --abs, --rel, --ratio and --psnr (the last two search for the bound
    meeting a compression ratio or a PSNR)."""
    bounds = {"abs": abs_bound, "rel": rel_bound, "ratio": ratio_target, "psnr": psnr_target}
    if sum(v is not None for v in bounds.values()) != 1:
        raise click.UsageError("give exactly one error bound: --abs, --rel, --ratio or --psnr")
    if chunk_mb is not None:
        array = _mapped_input(input_path, dtype, shape, byteorder)
        output = _output(output, input_path, ".amrzs", force)
        _compress_chunked(input_path, output, array, bounds, mode, threads, chunk_mb, verify)
        return
    array = _read_input(input_path, dtype, shape, byteorder)
    output = _output(output, input_path, ".amrz", force)
    try:
        # An unreachable ratio is a Python warning from the library; here it becomes one stderr line.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            stream, seconds = _timed(
                f"compressing {input_path.name}",
                array.nbytes,
                lambda: amrzip.compress(array, **bounds, mode=mode, threads=threads),
            )
    except ValueError as e:  # what the codec cannot take, such as an integer .npy
        raise click.UsageError(f"{input_path}: {e}") from None
    for w in caught:
        _warn(str(w.message))
    _arrayfile.write_bytes(output, stream)

    described = amrzip.info(stream)
    summary = (
        f"{input_path} -> {output}: {_size(array.nbytes)} -> {_size(len(stream))}, "
        f"ratio {array.nbytes / len(stream):.2f}, {_rate(array.nbytes, seconds)}"
    )
    if ratio_target is not None or psnr_target is not None:  # say which bound the search settled on
        summary += f", bound {_describe_bound(described)}"
    if verify:
        bound = described["abs_bound"]
        with _activity(f"verifying {output.name}", array.nbytes):
            decoded = amrzip.decompress(stream, threads=threads)
            error = max_abs_error(array, decoded)
            measured = psnr(array, decoded) if psnr_target is not None else None
        if not error <= bound:
            raise click.ClickException(f"verification failed: max error {error:.6g} exceeds the bound {bound:.6g}")
        summary += f", max error {error:.3g} ({error / bound if bound else 0:.3f} of bound {bound:.3g})"
        if measured is not None:
            # The target is a floor the codec promises, so missing it fails like a bound violation.
            # The codec sums in another order; 1e-9 dB covers that and nothing else.
            if not measured >= psnr_target - 1e-9:
                raise click.ClickException(f"verification failed: PSNR {measured:.6g} dB is below the target {psnr_target:g} dB")
            summary += f", PSNR {measured:.2f} dB"
    click.echo(summary)


def _warn(message: str):
    click.echo(f"amrzip: warning: {' '.join(message.split())}", err=True)


def _compress_chunked(input_path, output, array, bounds, mode, threads, chunk_mb, verify):
    """compress --chunk-mb: the input is read one slab along axis 0 at a time (twice for --rel:
    the value range first), so memory stays within a few slabs."""
    try:
        streaming._dtype(array.dtype)  # refused before a --rel pass over all of it
    except ValueError as e:
        raise click.UsageError(f"{input_path}: {e}") from None
    rest = array.shape[1:]
    rows = max(1, int(chunk_mb * 2**20) // max(1, array.itemsize * math.prod(rest)))
    n = array.shape[0]
    given = {k: v for k, v in bounds.items() if v is not None}
    if "rel" in given:
        # A chunked stream cannot know the range of slabs not read yet: find it first.
        with _progress(f"scanning {input_path.name}", array.nbytes) as advance:
            value_range = _finite_range(array, rows, advance)
        # rel * max - rel * min would not overflow where max - min does; beyond that, no bound.
        given = {"abs": min(given["rel"] * value_range, sys.float_info.max)}
    # A chunk shape cannot have a zero side; an input with no elements is then a flat empty stream.
    chunk = (rows, *rest) if all(rest) else rows
    try:
        start = time.perf_counter()
        with _arrayfile._replacing(output) as f, _progress(f"compressing {input_path.name}", array.nbytes) as advance:
            encoder = amrzip.StreamCompressor(array.dtype, chunk, **given, mode=mode, threads=threads, output=f)
            for first in range(0, n, rows):
                slab = _slab(array, first, min(rows, n - first))
                encoder.write(slab)
                advance(slab.nbytes)
            encoder.finish()
        seconds = time.perf_counter() - start
    except ValueError as e:  # what the codec cannot take, such as an integer .npy
        raise click.UsageError(f"{input_path}: {e}") from None
    described = amrzip.StreamDecompressor(output).describe()
    size = described["compressed_size"]
    achieved = array.nbytes / size
    if ratio_target := bounds["ratio"]:
        if array.nbytes and abs(achieved / ratio_target - 1) > RATIO_WARN:
            _warn(f"ratio {ratio_target:g} is not reachable for this array; the stream achieves {achieved:.4g}")
    summary = (
        f"{input_path} -> {output}: {_size(array.nbytes)} -> {_size(size)}, ratio {achieved:.2f}, "
        f"{_rate(array.nbytes, seconds)}, {described['records']} records"
    )
    if bounds["rel"] is not None:
        summary += f", bound {_describe_bound({'bound_mode': 'rel', 'bound': bounds['rel'], 'abs_bound': given['abs']})}"
    elif bounds["abs"] is None and described["records"]:
        summary += f", bound {_describe_chunked_bound(described)}"
    if verify:
        record_bounds = [record["abs_bound"] for record in described["per_record"]]
        summary += _verify_chunked(output, array, rows, record_bounds, bounds["psnr"], threads)
    click.echo(summary)


class _RunningPsnr:
    """amrzip._metrics.psnr over a stream seen piece by piece: the range and the squared errors
    of the finite values are summed as they come."""

    def __init__(self):
        self.lo, self.hi, self.sq, self.n = math.inf, -math.inf, 0.0, 0

    def add(self, x: np.ndarray, y: np.ndarray):
        x, y = x.astype(np.float64), y.astype(np.float64)
        finite = np.isfinite(x)
        x, y = x[finite], y[finite]
        if x.size:
            self.lo, self.hi = min(self.lo, x.min()), max(self.hi, x.max())
            self.sq += float(np.sum((x - y) ** 2))
            self.n += x.size

    def value(self) -> float:
        if self.n == 0 or self.sq == 0.0:
            return math.inf
        return 20 * math.log10(self.hi - self.lo) - 10 * math.log10(self.sq / self.n) if self.hi > self.lo else -math.inf


def _verify_chunked(output, array, rows, record_bounds, psnr_target, threads) -> str:
    """Decodes the stream record by record against the input: each record within the bound it
    reports and, for --psnr, the whole stream at or above the target. Returns the text for the
    summary."""
    worst, worst_share, quality = 0.0, 0.0, _RunningPsnr()
    with _progress(f"verifying {output.name}", array.nbytes) as advance:
        for k, decoded in enumerate(amrzip.StreamDecompressor(output, threads=threads)):
            original = _slab(array, k * rows, decoded.shape[0])
            error, bound = max_abs_error(original, decoded), record_bounds[k]
            if not error <= bound:
                raise click.ClickException(f"verification failed: max error {error:.6g} in record {k} exceeds its bound {bound:.6g}")
            worst, worst_share = max(worst, error), max(worst_share, error / bound if bound else 0.0)
            if psnr_target is not None:
                quality.add(original, decoded)
            advance(decoded.nbytes)
    text = f", max error {worst:.3g} (at most {worst_share:.3f} of its record's bound)"
    if psnr_target is not None:
        measured = quality.value()
        # As in whole-array --verify: 1e-9 dB covers the codec's other order of summing.
        if not measured >= psnr_target - 1e-9:
            raise click.ClickException(f"verification failed: PSNR {measured:.6g} dB is below the target {psnr_target:g} dB")
        text += f", PSNR {measured:.2f} dB"
    return text


@cli.command()
@click.argument("input_path", metavar="INPUT", type=_input_path)
@click.option(
    "-o", "--output", type=_output_path, help="Output: .npy, or raw C-order binary for any other name [default: INPUT with suffix .raw]."
)
@click.option(
    "--byteorder", type=click.Choice(list(_arrayfile.BYTEORDERS)), default="little", show_default=True, help="Byte order to write."
)
@_threads_option
@_force_option
def decompress(input_path, output, byteorder, threads, force):
    """Decompress the amrzip stream INPUT (or chunked stream) to raw binary or .npy."""
    if _chunked(input_path):
        output = _output(output, input_path, ".raw", force)
        try:
            _decompress_chunked(input_path, output, byteorder, threads)
        except amrzip.CorruptStreamError as e:
            raise _corrupt(input_path, e) from None
        return
    data, info = _read_stream(input_path)
    output = _output(output, input_path, ".raw", force)
    try:
        array, seconds = _timed(
            f"decompressing {input_path.name}", info["original_size"], lambda: amrzip.decompress(data, threads=threads)
        )
    except amrzip.CorruptStreamError as e:  # checksums pass but a chunk does not decode
        raise _corrupt(input_path, e) from None
    _arrayfile.write_array(output, array, byteorder)
    click.echo(
        f"{input_path} -> {output}: {_size(len(data))} -> {_size(array.nbytes)}, "
        f"{array.dtype.name} {_arrayfile.format_shape(array.shape)}, {_rate(array.nbytes, seconds)}"
    )


def _decompress_chunked(input_path: Path, output: Path, byteorder: str, threads):
    """Writes each chunk as it is decoded. A .npy header needs the final shape first: the count
    of elements comes from the end block, the other sides from the first chunk. The stream is
    checked in full only at its end; until then the output is a temporary file."""
    reader = amrzip.StreamDecompressor(input_path, threads=threads)
    _, elements = reader.declared_counts()
    stored = reader.dtype.newbyteorder(_arrayfile.BYTEORDERS[byteorder])
    shape = None

    def begin(f, rest):
        """The final shape, and the .npy header for it."""
        per_row = math.prod(rest)
        if per_row == 0 or elements % per_row:
            raise amrzip.CorruptStreamError(f"{elements} elements do not make rows of {_arrayfile.format_shape(rest)}")
        if _arrayfile.is_npy(output):
            header = {"descr": np.lib.format.dtype_to_descr(stored), "fortran_order": False, "shape": (elements // per_row, *rest)}
            np.lib.format.write_array_header_1_0(f, header)
        return (elements // per_row, *rest)

    begun = time.perf_counter()
    with _arrayfile._replacing(output) as f, _progress(f"decompressing {input_path.name}", elements * stored.itemsize) as advance:
        for chunk in reader:
            if shape is None:
                shape = begin(f, chunk.shape[1:])
            f.write(chunk.astype(stored, copy=False).data)
            advance(chunk.nbytes)
        if shape is None:  # no records: an empty flat array
            shape = begin(f, ())
    seconds = time.perf_counter() - begun
    nbytes = elements * stored.itemsize
    click.echo(
        f"{input_path} -> {output}: {_size(input_path.stat().st_size)} -> {_size(nbytes)}, "
        f"{stored.name} {_arrayfile.format_shape(shape)}, {_rate(nbytes, seconds)}"
    )


@cli.command()
@click.argument("input_path", metavar="INPUT", type=_input_path)
@click.option("--json", "as_json", is_flag=True, help="Print the full description as JSON.")
def info(input_path, as_json):
    """Describe the amrzip stream INPUT without decompressing it."""
    if _chunked(input_path):
        try:
            i = amrzip.StreamDecompressor(input_path).describe()
        except amrzip.CorruptStreamError as e:
            raise _corrupt(input_path, e) from None
        if as_json:  # the stream as a whole: what each record says is for the library
            click.echo(json.dumps({k: v for k, v in i.items() if k != "per_record"}, indent=2))
            return
        predictors = ", ".join(f"{name} ({_plural(n, 'record')})" for name, n in i["records_per_predictor"].items())
        _print_table([
            ("format", f"chunked stream, {_plural(i['records'], 'record')}"),
            ("dtype", i["dtype"]),
            ("shape", _arrayfile.format_shape(i["shape"])),
            ("chunk shape", _arrayfile.format_shape(i["chunk_shape"]) or "-"),
            ("mode", i["mode"] or "-"),
            ("bound", _describe_chunked_bound(i)),
            ("predictor", predictors or "-"),
            ("codebooks", ", ".join(f"{n} {kind}" for kind, n in i["codebooks"].items())),
            ("original", _size(i["original_size"])),
            ("compressed", _size(i["compressed_size"])),
            ("ratio", f"{i['ratio']:.2f}"),
        ])
        return
    _, i = _read_stream(input_path)
    if as_json:
        click.echo(json.dumps(i, indent=2))
        return
    predictors = ", ".join(f"{name} ({_plural(n, 'chunk')})" for name, n in i["chunks_per_predictor"].items())
    rows = [
        ("dtype", i["dtype"]),
        ("shape", _arrayfile.format_shape(i["shape"])),
        ("mode", i["mode"]),
        ("bound", _describe_bound(i)),
        ("predictor", predictors or "-"),
        ("chunk shape", _arrayfile.format_shape(i["chunk_shape"])),
        ("original", _size(i["original_size"])),
        ("compressed", _size(i["compressed_size"])),
        ("ratio", f"{i['ratio']:.2f}"),
    ]
    _print_table(rows)


def _print_table(rows):
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    for row in rows:
        table.add_row(*row)
    Console().print(table)


@cli.command("demo")
@click.option("--size", type=click.IntRange(16, 256), default=128, show_default=True, help="Edge length of the cubic field.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random field.")
@_threads_option
@click.option("--amr/--no-amr", default=True, show_default=True, help="Also write and read back a built-in AMR hierarchy.")
def demo_command(size, seed, threads, amr):
    """Compress a built-in turbulence-like field in both modes at rel 1e-3 and 1e-4 and tabulate
    ratio, accuracy and throughput; then write a built-in Nyx-like AMR hierarchy to a snapshot
    store and measure what comes back over its leaf cells."""
    results = demo.run(size, seed, threads)
    if amr:
        click.echo()
        results += amr_demo.run(seed=seed, threads=threads)
    if any(not r.error_over_bound <= 1.0 for r in results):
        raise click.ClickException("the error bound was exceeded")


# --- AMR snapshots: convert, inspect, extract ----------------------------------------------------

_amr_input = click.Path(exists=True, path_type=Path)
_store_input = click.Path(exists=True, file_okay=False, path_type=Path)
_COORDINATES = {0: "Cartesian", 1: "cylindrical", 2: "spherical"}
_STATS = ("stored_cells", "blocks", "partial_blocks", "chunks", "original_bytes", "stored_bytes")


def _parse_names(ctx, param, value):
    """Field names separated by commas, in the order given, each once."""
    if value is None:
        return None
    names = [n.strip() for n in value.split(",")]
    if not all(names):
        raise click.BadParameter(f"expected field names separated by commas; got {value!r}")
    return list(dict.fromkeys(names))


def _parse_field_bounds(ctx, param, values) -> dict:
    """--bound FIELD=rel:VALUE or FIELD=abs:VALUE, repeated: {field: {mode: value}}."""
    out = {}
    for text in values:
        name, eq, spec = text.rpartition("=")
        mode, colon, number = spec.partition(":")
        if not (eq and name and colon and mode in ("rel", "abs")):
            raise click.BadParameter(f"expected FIELD=rel:VALUE or FIELD=abs:VALUE; got {text!r}")
        try:
            value = float(number)
        except ValueError:
            raise click.BadParameter(f"{text!r}: {number!r} is not a number") from None
        if not (math.isfinite(value) and value >= 0):
            raise click.BadParameter(f"{text!r}: the bound must be a finite number >= 0")
        if name in out:
            raise click.BadParameter(f"field {name!r} is given twice")
        out[name] = {mode: value}
    return out


def _names(names, most: int = 8) -> str:
    """A list of names for a one-line message, shortened in the middle when long."""
    names = list(names)
    if len(names) > most:
        names = [*names[: most // 2], f"... {len(names) - most + 2} more ...", *names[-(most // 2 - 1) :]]
    return ", ".join(names)


def _pick_fields(available, wanted, option: str, where) -> list[str]:
    if wanted is None:
        return list(available)
    unknown = [f for f in wanted if f not in available]
    if unknown:
        raise click.UsageError(
            f"{option}: {where} has no field {', '.join(map(repr, unknown))} (its fields: {_names(available, 40)})"
        )
    return wanted


def _format_box(box) -> str:
    """A box as --region takes it: lo:hi."""
    return f"{','.join(map(str, box[0]))}:{','.join(map(str, box[1]))}"


def _format_values(values, fmt: str = "g") -> str:
    """Per-dimension values, one of them when all are equal."""
    values = list(values)
    return format(values[0], fmt) if all(v == values[0] for v in values) else ",".join(format(v, fmt) for v in values)


def _parse_region(text: str, dim: int, domain, level: int):
    example = _format_box(((0,) * dim, (31,) * dim))
    lo_text, colon, hi_text = text.partition(":")
    try:
        lo, hi = (tuple(int(v) for v in part.split(",")) for part in (lo_text, hi_text))
    except ValueError:
        lo = hi = ()
    if not colon or len(lo) != dim or len(hi) != dim:
        raise click.UsageError(f"--region: expected lo:hi, two lists of {dim} integers such as {example}; got {text!r}")
    if any(h < l for l, h in zip(lo, hi)):
        raise click.UsageError(f"--region {text}: hi is below lo")
    if not all(dlo <= l and h <= dhi for l, h, dlo, dhi in zip(lo, hi, *domain)):
        raise click.UsageError(f"--region {text} is not inside the domain of level {level}, {_format_box(domain)}")
    return lo, hi


def _open_snapshot(store: Path, name) -> tuple[list[str], "amrzip.Dataset"]:
    """The store's committed snapshots and snapshot ``name`` (default: the latest) opened."""
    try:
        names = store_snapshots(store)
    except amrzip.StoreError as e:
        raise click.ClickException(str(e)) from None
    if not names:
        raise click.ClickException(f"{store}: the store holds no committed snapshot")
    if name is not None and name not in names:
        raise click.UsageError(f"--snapshot {name}: {store} has no such snapshot (snapshots: {_names(names)})")
    try:
        return names, amrzip.open(store, snapshot=name)
    except amrzip.StoreError as e:
        raise click.ClickException(str(e)) from None


@contextmanager
def _write_progress(description: str, pieces: dict):
    """A bar of bytes done on stderr while amrzip.write runs, shown under the same conditions as
    _progress. ``pieces`` maps the messages the writer reports as it starts each array
    ("level L field F") to the bytes of that array, in the writer's order. Yields the function
    to pass as ``progress=``."""
    console = Console(stderr=True)
    total = sum(pieces.values())
    if total < PROGRESS_MIN_BYTES or not console.is_terminal:
        yield lambda message: None
        return
    before, done = {}, 0
    for message, n in pieces.items():
        before[message], done = done, done + n
    columns = (
        TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn()
    )
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(description, total=total)

        def report(message: str):
            progress.update(task, description=f"{description}: {message}", completed=before.get(message))

        yield report


@cli.command()
@click.argument("source", metavar="PLOTFILE", type=_amr_input)
@click.argument("store", metavar="OUT", type=click.Path(path_type=Path))
@click.option(
    "--rel", "rel_bound", type=float, callback=_check_bound,
    help="Error bound of every field, as a fraction of its value range over the cells stored.",
)
@click.option("--abs", "abs_bound", type=float, callback=_check_bound, help="Absolute error bound of every field.")
@click.option(
    "--bound", "bounds", multiple=True, metavar="FIELD=MODE:VALUE", callback=_parse_field_bounds,
    help="Error bound of one field, such as temp=abs:0.5 or density=rel:1e-3, in place of --rel/--abs; repeat for more fields.",
)
@click.option("--snapshot", help="Name of the new snapshot in OUT [default: step_<step>, such as step_000120].")
@click.option("--fields", callback=_parse_names, help="Only these fields, separated by commas [default: all].")
@click.option(
    "--unit", type=click.IntRange(2, 256),
    help="Unit block edge in cells [default: the blocking factor of the boxes or a larger edge, whichever codes smaller on a sample].",
)
@click.option(
    "--chunk", type=click.IntRange(min=1),
    help="Chunk edge in cells, rounded up to a multiple of the unit block [default: about the boxes' size or larger, 16-32 in 3-d, 32-128 in 2-d, whichever codes smaller].",
)
@click.option("--mode", type=click.Choice(MODES), default="ratio", show_default=True, help="Optimise for ratio or for speed.")
@click.option(
    "--layout", type=click.Choice(["amr", "multires"]), default="amr", show_default=True,
    help="amr: a level per array, covered cells dropped; multires: the levels coalesced into one HZ-ordered array per field, read at any resolution.",
)
@_threads_option
def convert(source, store, rel_bound, abs_bound, bounds, snapshot, fields, unit, chunk, mode, layout, threads):
    """Compress the AMR snapshot PLOTFILE (AMReX plotfile folder, AMReX HDF5 or Chombo HDF5) into
    the snapshot store OUT, created if needed, as a new snapshot. Every stored cell keeps its
    field's error bound; cells that a finer level covers are not stored but rebuilt on reading."""
    if rel_bound is not None and abs_bound is not None:
        raise click.UsageError("give --rel or --abs, not both")
    if snapshot is not None:
        try:
            check_snapshot_name(snapshot)
        except ValueError as e:
            raise click.UsageError(f"--snapshot: {e}") from None
    try:
        h = amrzip.read(source)
    except ValueError as e:  # not a known format, malformed or truncated: the message names the file
        raise click.ClickException(str(e)) from None
    chosen = _pick_fields(h.fields, fields, "--fields", source)
    stray = [f for f in bounds if f not in chosen]
    if stray:
        raise click.UsageError(f"--bound: {', '.join(map(repr, stray))} is not among the fields converted ({_names(chosen, 40)})")
    unbounded = [f for f in chosen if f not in bounds]
    if unbounded and rel_bound is None and abs_bound is None:
        raise click.UsageError(
            f"give an error bound: --rel or --abs, or --bound FIELD=MODE:VALUE for every field (missing for {_names(unbounded)})"
        )
    if chosen != h.fields:
        h = h.only(chosen)
    # Under an MPI launcher every rank reads and compresses its share of the boxes.
    comm = parallel.world()
    lead = comm is None or comm.Get_rank() == 0
    if layout == "multires":
        for option, value in (("--unit", unit), ("--chunk", chunk), ("--mode", None if mode == "ratio" else mode)):
            if value is not None:
                raise click.UsageError(f"{option} applies to --layout amr")
        if comm is not None and comm.Get_size() > 1:
            _stop(lead, "--layout multires is written by one process; run it without mpiexec")
        _convert_multires(source, store, h, rel_bound, abs_bound, bounds, snapshot, threads)
        return
    options = dict(rel=rel_bound, abs=abs_bound, bounds=bounds or None, snapshot=snapshot, mode=mode, unit=unit, chunk=chunk, threads=threads)
    try:
        itemsize = {f: np.dtype(h.dtype(f)).itemsize for f in h.fields}
        pieces = {f"level {L} field {f}": lev.num_cells * itemsize[f] for L, lev in enumerate(h.levels) for f in h.fields}
        with _write_progress(f"converting {source.name}", pieces if lead else {}) as report:
            start = time.perf_counter()
            if comm is None:
                summary = amrzip.write(h, store, progress=report, **options)
            else:
                summary = parallel.write_from(comm, h, store, progress=report, **options)
            seconds = time.perf_counter() - start
    except FileExistsError as e:  # the snapshot exists, or OUT is something other than a store
        hint = "; choose another name with --snapshot" if "already exists" in str(e) else ""
        _stop(lead, f"{e}{hint}")
    except ValueError as e:  # OUT is a damaged store, or data that cannot be read or stored
        _stop(lead, str(e))
    if not lead:
        return
    original, stored = summary["original_bytes"], summary["stored_bytes"]
    click.echo(
        f"{source} -> {summary['path']}: {_plural(h.num_levels, 'level')}, {_plural(len(h.fields), 'field')}, "
        f"{_size(original)} -> {_size(stored)}, ratio {summary['ratio']:.2f}, {seconds:.2f} s, {_rate(original, seconds)}"
    )


def _convert_multires(source, store, h, rel_bound, abs_bound, bounds, snapshot, threads):
    itemsize = {f: np.dtype(h.dtype(f)).itemsize for f in h.fields}
    pieces = {f"field {f}": sum(lev.num_cells for lev in h.levels) * itemsize[f] for f in h.fields}
    try:
        with _write_progress(f"converting {source.name}", pieces) as report:
            start = time.perf_counter()
            summary = multires.write(h, store, rel=rel_bound, abs=abs_bound, bounds=bounds or None, snapshot=snapshot,
                                     threads=threads, progress=report)
            seconds = time.perf_counter() - start
    except FileExistsError as e:
        hint = "; choose another name with --snapshot" if "already exists" in str(e) else ""
        raise click.ClickException(f"{e}{hint}") from None
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    original, stored = summary["original_bytes"], summary["stored_bytes"]
    click.echo(
        f"{source} -> {store}: snapshot {summary['snapshot']}, multiresolution, {_plural(len(h.fields), 'field')}, "
        f"{_size(original)} -> {_size(stored)}, ratio {summary['ratio']:.2f}, {seconds:.2f} s, {_rate(original, seconds)}"
    )


def _stop(lead: bool, message: str):
    """Stops with `message`, which only the lead process of a parallel run prints."""
    if lead:
        raise click.ClickException(message) from None
    sys.exit(1)


def _stdout_console() -> Console:
    """The console for tables on stdout: the terminal's width, or wide enough not to wrap rows
    when the output goes to a file or a pipe. Field names are text, never rich markup."""
    console = Console(markup=False)
    return console if console.is_terminal else Console(markup=False, width=max(console.width, 200))


def _optional(value, fmt=str) -> str:
    return "-" if value is None else fmt(value)


def _print_snapshot(d: dict):
    console = _stdout_console()
    snapshots = d["snapshots"]
    source = " ".join(str(v) for v in d["source"].values())
    totals = d["totals"]
    overview = Table.grid(padding=(0, 2))
    overview.add_column(style="bold")
    overview.add_column()
    for row in [
        ("store", f"{d['store']}: {_plural(len(snapshots), 'snapshot')} ({_names(snapshots)})"),
        ("snapshot", d["snapshot"]),
        ("time", f"{d['time']:g} (step {d['step']})"),
        ("dimension", f"{d['dim']}-d, {_plural(len(d['levels']), 'level')}, {_COORDINATES.get(d['coord_sys'], d['coord_sys'])}"),
        ("physical domain", f"{','.join(f'{v:g}' for v in d['prob_lo'])} to {','.join(f'{v:g}' for v in d['prob_hi'])}"),
        *([("source", source)] if source else []),
        ("stored", f"{_size(totals['stored_bytes'])} of {_size(totals['original_bytes'])}, ratio {totals['ratio']:.2f} "
                   f"(every byte of the snapshot; {_size(totals['disk_bytes'])} on disk)"),
    ]:
        overview.add_row(*row)
    console.print(overview)

    fields = Table(title="fields", title_justify="left", box=None, header_style="bold", pad_edge=False)
    for name in ("field", "dtype", "bound", "abs bound"):
        fields.add_column(name, justify="left" if name in ("field", "dtype", "bound") else "right")
    for f, b in d["fields"].items():
        fields.add_row(f, _optional(b["dtype"]), f"{b['mode']} {b['value']:g}", f"{b['abs_bound']:.6g}")
    console.print()
    console.print(fields)

    levels = Table(title="levels", title_justify="left", box=None, header_style="bold", pad_edge=False)
    for name in ("level", "domain", "size", "boxes", "ref ratio", "dx", "cells", "stored", "covered"):
        levels.add_column(name, justify="left" if name in ("domain", "size", "dx") else "right")
    for lev in d["levels"]:
        fraction = lev["stored_fraction"]
        levels.add_row(
            str(lev["level"]), _format_box(lev["domain"]), _arrayfile.format_shape(lev["shape"]), str(lev["boxes"]),
            _optional(lev["ref_ratio"], _format_values), _format_values(lev["dx"], ".6g"),
            str(lev["cells"]),
            _optional(lev["stored_cells"], lambda n: f"{n} ({fraction:.1%})"),
            _optional(lev["covered_cells"], lambda n: f"{n} ({1 - fraction:.1%})"),
        )
    console.print()
    console.print(levels)

    arrays = Table(title="arrays", title_justify="left", box=None, header_style="bold", pad_edge=False, show_footer=True)
    sums = {k: sum(a[k] or 0 for lev in d["levels"] for a in lev["fields"].values()) for k in _STATS}
    footer = {
        "level": "total", "stored cells": str(sums["stored_cells"]), "blocks (partial)": f"{sums['blocks']} ({sums['partial_blocks']})",
        "chunks": str(sums["chunks"]), "original": _size(totals["original_bytes"]), "stored": _size(totals["stored_bytes"]),
        "ratio": f"{totals['ratio']:.2f}",
    }
    for name in ("level", "field", "stored cells", "unit", "chunk", "blocks (partial)", "chunks", "original", "stored", "ratio", "predictor"):
        arrays.add_column(name, footer=footer.get(name, ""), justify="left" if name in ("field", "predictor") else "right")
    for lev in d["levels"]:
        for f, a in lev["fields"].items():
            blocks = f"{a['blocks']} ({a['partial_blocks']})" if a["blocks"] is not None else "-"
            arrays.add_row(
                str(lev["level"]), f, _optional(a["stored_cells"]), str(a["unit"]), str(a["chunk"]), blocks, _optional(a["chunks"]),
                _optional(a["original_bytes"], _size), _optional(a["stored_bytes"], _size), _optional(a["ratio"], "{:.2f}".format),
                _optional(a["predictor"]),
            )
    console.print()
    console.print(arrays)


def _variables_snapshot(store: Path, name) -> dict | None:
    """The variables of snapshot ``name`` (default: the latest) when it is a snapshot of plain
    variables (amrzip.parallel.Writer), else None."""
    from amrzip import _core

    try:
        return {"snapshot": name, "variables": _core.VariablesFile(str(store), name).variables()}
    except (ValueError, KeyError, amrzip.StoreError):
        return None


def _print_variables(store: Path, d: dict, as_json: bool):
    if as_json:
        click.echo(json.dumps({"store": str(store), "kind": "variables", **d}, indent=2))
        return
    out = _stdout_console()
    out.print(f"plain variables, in {store}", soft_wrap=True)
    table = Table(box=None)
    for column in ("variable", "type", "shape", "chunks", "abs bound", "chunks written", "stored"):
        table.add_column(column, justify="left" if column in ("variable", "type") else "right")
    for v in d["variables"]:
        table.add_row(v["name"], v["dtype"], "x".join(map(str, v["shape"])), "x".join(map(str, v["chunks"])),
                      f"{v['abs_bound']:.3g}", str(v["chunks_written"]), _size(v["stored_bytes"]))
    out.print(table)


@cli.command()
@click.argument("store", metavar="OUT", type=_store_input)
@click.option("--snapshot", help="Snapshot to describe [default: the latest].")
@click.option("--json", "as_json", is_flag=True, help="Print the description as JSON.")
def inspect(store, snapshot, as_json):
    """Describe the snapshot store OUT: its snapshots and, for one of them, the fields and their
    bounds, the levels (boxes, blocks, chunks, cells stored and covered) and the sizes per level
    and field. Reads metadata only."""
    variables = _variables_snapshot(store, snapshot)
    if variables is not None:
        _print_variables(store, variables, as_json)
        return
    names, ds = _open_snapshot(store, snapshot)
    try:
        described = {"store": str(store), "snapshots": names, **ds.describe()}
    except amrzip.StoreError as e:
        raise click.ClickException(str(e)) from None
    if as_json:
        click.echo(json.dumps(described, indent=2))
        return
    if isinstance(ds, MultiresDataset):
        _print_multires(described)
        return
    _print_snapshot(described)


def _print_multires(d: dict):
    out = _stdout_console()
    out.print(f"snapshot {d['snapshot']} (multiresolution, HZ order), in {d['store']}", soft_wrap=True)
    table = Table(box=None)
    for column in ("field", "type", "shape", "abs bound", "HZ levels", "blocks stored", "kept", "stored", "ratio"):
        table.add_column(column, justify="left" if column in ("field", "type") else "right")
    for f in d["fields"]:
        # An AMR field's raw size is its levels' cells, not the coalesced space's.
        cells = (f.get("attributes") or {}).get("amr_cells") or math.prod(f["shape"])
        raw = cells * np.dtype(f["dtype"]).itemsize
        stored = f["index_bytes"] + f["data_bytes"]
        kept = "all" if not f["tile"] else f"tiles of {f['tile']}"
        table.add_row(
            f["name"], f["dtype"], "x".join(map(str, f["shape"])), f"{f['bound']['abs']:.3g}", str(f["levels"]),
            f"{f['blocks_stored']}/{f['blocks']}", kept, _size(stored), f"{raw / max(stored, 1):.1f}",
        )
    out.print(table)


@cli.command()
@click.argument("store", metavar="STORE", type=_store_input)
@click.option("--repair", is_flag=True, help="Finish or remove what interrupted writers left (committed snapshots are never changed).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def check(store, repair, as_json):
    """Verify every snapshot of STORE: checksums, every chunk present where the boxes store cells
    and nowhere else, in its place, decoding to the cells its boxes hold, metadata consistent.
    Also lists the work of interrupted writers, which --repair finishes (a snapshot written whole
    gets its name) or removes. Exit status 1 if anything is wrong or left to repair."""
    try:
        report = amrzip.check(store, repair=repair)
    except amrzip.StoreError as e:
        raise click.ClickException(str(e)) from None
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        for snap in report["snapshots"]:
            state = f"ok, {_plural(snap['chunks'], 'chunk')} checked" if snap["ok"] else f"DAMAGED: {snap['problem']}"
            click.echo(f"{snap['name']}: {state}")
        for t in report["interrupted"]:
            what = f"interrupted write of snapshot {t['snapshot']!r}" if t["snapshot"] else "interrupted write"
            if t["in_progress"]:
                state = "a writer is still at work on it"
            elif repair:
                state = t["action"]
            else:
                state = "left over (amrzip check --repair finishes or removes it)"
            click.echo(f"{t['path']}: {what}: {state}")
        for u in report["unlisted"]:
            state = "listed" if repair else "committed but not listed (amrzip check --repair lists it)"
            click.echo(f"{u['name']}: {state}")
        click.echo(f"{store}: {'ok' if report['ok'] else 'problems found'} ({_plural(len(report['snapshots']), 'snapshot')})")
    if not report["ok"]:
        sys.exit(1)


@cli.command()
@click.argument("store", metavar="OUT", type=_store_input)
@click.option("--snapshot", help="Snapshot to read [default: the latest].")
@click.option("--level", type=click.IntRange(min=0), help="Level of the region (.npy output).")
@click.option(
    "--field", "fields", callback=_parse_names,
    help="Field of the region (.npy output); for a plotfile folder, fields separated by commas [default: all].",
)
@click.option(
    "--region", "region_text", metavar="LO:HI",
    help="Cells to extract, inclusive indices in the level's index space such as 0,0,0:31,31,31 [default: the level's domain].",
)
@click.option(
    "--covered", type=click.Choice(COVERED),
    help="Cells a finer level covers: rebuilt by averaging the finer level down, or NaN [default: average].",
)
@click.option(
    "-o", "--output", type=click.Path(path_type=Path), required=True,
    help="A .npy file for a region; any other name writes the snapshot as an AMReX plotfile folder.",
)
@click.option("--plotfile", "as_plotfile", is_flag=True, help="Write an AMReX plotfile folder whatever OUTPUT is named.")
@click.option(
    "--resolution", metavar="FRACTION",
    help="Multiresolution snapshots: the fraction of the points to read, 1/2^m such as 1/8 or 1/64 [default: 1].",
)
@click.option(
    "--format", "idx_format", type=click.Choice(["npy", "idx"]),
    help="Multiresolution snapshots: write .npy, or an OpenVisus IDX dataset (needs the openvisus package) [default: from OUTPUT's suffix].",
)
@_force_option
def extract(store, snapshot, level, fields, region_text, covered, output, as_plotfile, resolution, idx_format, force):
    """Extract from the snapshot store OUT one field of one level over a region, as .npy
    (indexed [i, j, k], x first), or the whole snapshot (all fields, or --field) as an AMReX
    plotfile folder. Only the chunks needed are read. From a multiresolution snapshot: one field
    at --resolution over --region (in the full-resolution index space), as .npy or as an
    OpenVisus IDX dataset; only the blocks needed are read."""
    _, ds = _open_snapshot(store, snapshot)
    if isinstance(ds, MultiresDataset):
        _extract_multires(ds, fields, region_text, resolution, idx_format, output, force,
                          level=level, covered=covered, as_plotfile=as_plotfile)
        return
    for option, value in (("--resolution", resolution), ("--format", idx_format)):
        if value is not None:
            raise click.UsageError(f"{option} applies to multiresolution snapshots; snapshot {ds.name} is an AMR one")
    where = f"snapshot {ds.name}"
    plotfile = as_plotfile or output.suffix.lower() != ".npy"
    if plotfile:
        for option, value in (("--level", level), ("--region", region_text), ("--covered", covered)):
            if value is not None:
                raise click.UsageError(f"{option} applies to a .npy extract, not to a plotfile folder ({output})")
    elif level is None or fields is None or len(fields) != 1:
        raise click.UsageError("a .npy extract takes --level and one --field (or name a folder with -o to write a plotfile)")
    chosen = _pick_fields(ds.fields, fields, "--field", where)
    if output.exists() and not force:
        raise click.UsageError(f"{output} exists; pass --force to overwrite it")
    itemsize = {f: np.dtype(ds.meta.get("dtypes", {}).get(f, "float64")).itemsize for f in chosen}
    try:
        if plotfile:
            from amrzip.formats import write_plotfile

            h = ds.to_hierarchy()
            if chosen != ds.fields:
                h = h.only(chosen)
            nbytes = sum(lev.num_cells for lev in h.levels) * sum(itemsize.values())
            with _activity(f"writing {output.name}", nbytes):
                write_plotfile(h, output)
            what = f"AMReX plotfile, {_plural(h.num_levels, 'level')}, {_plural(len(chosen), 'field')}, {_size(nbytes)}"
        else:
            if level >= ds.num_levels:
                raise click.UsageError(f"--level {level}: {where} has levels 0 to {ds.num_levels - 1}")
            lev = ds.level(level)
            region = lev.index_space if region_text is None else _parse_region(region_text, ds.dim, lev.index_space, level)
            field = chosen[0]
            with _activity(f"extracting {field}", math.prod(box_shape(region)) * itemsize[field]):
                array = ds.read(field, region=region, level=level, covered=covered or "average")
            _arrayfile.write_array(output, array, "little")
            what = f"{field} on level {level}, cells {_format_box(region)}, {array.dtype.name} {_arrayfile.format_shape(array.shape)}"
    except amrzip.StoreError as e:
        raise click.ClickException(str(e)) from None
    except ValueError as e:  # a chunk that does not decode, or write_plotfile refusing OUTPUT
        raise click.ClickException(str(e)) from None
    read = ds.bytes_read
    click.echo(f"{ds.path} -> {output}: {what}; read {_size(read)} from the store (the snapshot holds {_size(ds.stored_bytes)})")


def _extract_multires(ds, fields, region_text, resolution, idx_format, output, force, *, level, covered, as_plotfile):
    for option, value in (("--level", level), ("--covered", covered), ("--plotfile", as_plotfile or None)):
        if value is not None:
            raise click.UsageError(f"{option} applies to AMR snapshots; snapshot {ds.name} is a multiresolution one")
    if fields is None and len(ds.fields) == 1:
        fields = ds.fields
    if fields is None or len(fields) != 1:
        raise click.UsageError(f"give one --field (snapshot {ds.name} holds {_names(ds.fields)})")
    (field,) = _pick_fields(ds.fields, fields, "--field", f"snapshot {ds.name}")
    fmt = idx_format or ("idx" if output.suffix.lower() == ".idx" else "npy")
    if output.exists() and not force:
        raise click.UsageError(f"{output} exists; pass --force to overwrite it")
    try:
        dropped = levels_dropped(resolution if resolution is not None else 1, "--resolution")
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    shape = ds.shape(field)
    region = None
    if region_text is not None:
        lo, hi = _parse_region(region_text, len(shape), ((0,) * len(shape), tuple(n - 1 for n in shape)), 0)
        region = tuple((a, b + 1) for a, b in zip(lo, hi))
    if fmt == "idx" and region is not None:
        raise click.UsageError("--region applies to .npy extracts; an IDX export holds the whole field")
    itemsize = np.dtype(ds.info(field)["dtype"]).itemsize
    nbytes = math.prod(shape) * itemsize >> dropped
    try:
        if fmt == "idx":
            with _activity(f"exporting {field}", nbytes):
                export_idx(ds, field, output, resolution=Fraction(1, 1 << dropped))
            what = f"{field} as OpenVisus IDX"
        else:
            with _activity(f"extracting {field}", nbytes):
                array = ds.read(field, resolution=Fraction(1, 1 << dropped), region=region)
            _arrayfile.write_array(output, array, "little")
            what = f"{field} at 1/{1 << dropped} of its points, {array.dtype.name} {_arrayfile.format_shape(array.shape)}"
    except (amrzip.StoreError, ValueError, RuntimeError) as e:
        raise click.ClickException(str(e)) from None
    click.echo(f"{ds.path} -> {output}: {what}; read {_size(ds.bytes_read)} from the store (the snapshot holds {_size(ds.stored_bytes)})")


@cli.command("config")
@click.option("--cflags", is_flag=True, help="Compiler flags: where amrzip.h is.")
@click.option("--libs", is_flag=True, help="Linker flags for libamrzip.so, with an rpath to it.")
@click.option("--static", is_flag=True, help="With --libs: libamrzip.a and the system libraries it needs instead.")
@click.option("--pkg-config-path", "pc_path", is_flag=True, help="The folder holding amrzip.pc, for PKG_CONFIG_PATH.")
def config_command(cflags, libs, static, pc_path):
    """Print what building a C or C++ program against this installation's amrzip C library takes,
    on one line, like pkg-config: cc $(amrzip config --cflags) prog.c $(amrzip config --libs)."""
    if static and not libs:
        raise click.UsageError("--static goes with --libs")
    if not (cflags or libs or pc_path):
        raise click.UsageError("give --cflags, --libs or --pkg-config-path")
    words = capi.cflags() if cflags else []
    words += capi.libs(static=static) if libs else []
    words += [capi.pkg_config_path()] if pc_path else []
    click.echo(" ".join(words))


@cli.group("plot")
def plot_group():
    """Pictures (PNG or SVG, by the output's suffix): a slice with the boxes of every level
    outlined, or where a store's error went against its source."""


def _image_path(ctx, param, value: Path) -> Path:
    if value.suffix.lower() not in (".png", ".svg"):
        raise click.BadParameter(f"{value} should end in .png or .svg")
    return value


_plot_output = click.option("-o", "--output", type=_output_path, required=True, callback=_image_path, help="Image file: .png or .svg.")
_plot_dpi = click.option("--dpi", type=click.IntRange(20, 1200), default=150, show_default=True, help="Resolution of a PNG.")
_plot_options = [
    click.option("--field", help="Field to show [default: the first]."),
    click.option("--axis", type=click.Choice(list("xyz")), help="Axis normal to the slice (3-D) [default: z]."),
    click.option("--coord", type=float, help="Where the slice cuts that axis, in physical units [default: the middle]."),
    click.option("--snapshot", help="Snapshot of a store [default: the latest]."),
    click.option("--no-outlines", "outlines", is_flag=True, flag_value=False, default=True, help="Leave the box outlines out."),
    _plot_dpi,
]


def _plot_source(path: Path, snapshot):
    try:
        return plot.source_of(path, snapshot)
    except (ValueError, OSError, amrzip.StoreError) as e:
        raise click.ClickException(str(e)) from None


def _save(fig, output: Path, dpi: int):
    fig.savefig(output, dpi=dpi)
    click.echo(f"wrote {output}")


def _plot_field(src, field):
    fields = src.fields
    if field is None:
        return fields[0]
    if field not in fields:
        raise click.BadParameter(f"no field {field!r} (fields: {_names(fields)})", param_hint="--field")
    return field


@plot_group.command("slice")
@click.argument("input_path", metavar="INPUT", type=click.Path(exists=True, path_type=Path))
@_plot_output
@click.option("--log", is_flag=True, help="Logarithmic colour scale.")
@stage_commands.option_group(_plot_options)
def plot_slice_command(input_path, output, log, field, axis, coord, snapshot, outlines, dpi):
    """A slice of a field of a store's snapshot or of an AMR file, boxes outlined per level."""
    src = _plot_source(input_path, snapshot)
    field = _plot_field(src, field)
    try:
        fig = plot.plot_slice(src, field, axis, coord, outlines=outlines, log=log)
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    _save(fig, output, dpi)


@plot_group.command("error")
@click.argument("store", type=click.Path(exists=True, path_type=Path))
@click.argument("source", type=click.Path(exists=True, path_type=Path))
@_plot_output
@stage_commands.option_group(_plot_options)
def plot_error_command(store, source, output, field, axis, coord, snapshot, outlines, dpi):
    """Where the error went: |STORE - SOURCE| on a slice, over the bound (SOURCE: the AMR file
    the snapshot was written from)."""
    ds = _plot_source(store, snapshot)
    if not isinstance(ds, amrzip.Dataset):
        raise click.ClickException(f"{store} is not a snapshot store")
    field = _plot_field(ds, field)
    try:
        fig = plot.plot_error(ds, _plot_source(source, None), field, axis, coord, outlines=outlines)
    except (ValueError, KeyError) as e:
        raise click.ClickException(str(e)) from None
    _save(fig, output, dpi)


@plot_group.command("rd")
@click.argument("input_path", metavar="INPUT", type=click.Path(exists=True, path_type=Path))
@_plot_output
@click.option("--field", help="Field to measure [default: the first].")
@click.option("--bounds", "rels", default="1e-2,1e-3,1e-4,1e-5", show_default=True, help="Value-range relative bounds, comma separated.")
@click.option("--no-baselines", "with_baselines", is_flag=True, flag_value=False, default=True, help="Leave out per-box SZ3 and the 1-D baseline.")
@_plot_dpi
def plot_rd_command(input_path, output, field, rels, with_baselines, dpi):
    """The rate-distortion curve (ratio against PSNR) of a field of an AMR file, compressed into
    a store at each bound, against per-box SZ3 and AMReX's 1-D baseline (with pysz installed)."""
    try:
        bounds = [float(v) for v in rels.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"{rels!r} is not a comma-separated list of numbers", param_hint="--bounds") from None
    if not bounds or any(not 0 < b < 1 for b in bounds):
        raise click.BadParameter("bounds are fractions of the value range, between 0 and 1", param_hint="--bounds")
    src = _plot_source(input_path, None)
    h = src.to_hierarchy() if isinstance(src, amrzip.Dataset) else src
    field = _plot_field(h, field)
    if with_baselines and not baselines.have_sz3():
        _warn("pysz is not installed: the curve has no SZ3 baselines (pip install pysz)")
    raw = sum(lev.num_cells for lev in h.levels) * h.dtype(field).itemsize
    with _progress(f"{field} at {len(bounds)} bounds", raw * len(bounds)) as advance:
        curves = plot.rate_distortion(h, field, bounds, baselines=with_baselines, progress=advance)
    for name, points in curves.items():
        click.echo(f"{name}: " + ", ".join(f"rel {r:g}: {p:.1f} dB, ratio {q:.1f}" for r, p, q in points))
    _save(plot.plot_rate_distortion(curves, f"{field} of {input_path.name}"), output, dpi)


cli.add_command(stage_commands.stage)


def _fail(message: str, status: int):
    click.echo(f"amrzip: error: {' '.join(message.split())}", err=True)
    sys.exit(status)


def main(args=None):
    """Entry point: click handles parsing, but errors are reported as one line, not a usage screen."""
    try:
        status = cli.main(args=args, prog_name="amrzip", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as e:
        e.show()  # the help text itself
        sys.exit(e.exit_code)
    except click.UsageError as e:
        hint = f" (see '{e.ctx.command_path} --help')" if e.ctx is not None else ""
        _fail(e.format_message() + hint, e.exit_code)
    except click.ClickException as e:
        _fail(e.format_message(), e.exit_code)
    except OSError as e:
        _fail(f"{e.filename}: {e.strerror}" if e.filename and e.strerror else str(e), 1)
    except click.Abort:
        _fail("interrupted", 130)
    sys.exit(status if isinstance(status, int) else 0)
