"""The ``amrzip`` command: compress, decompress and inspect arrays stored as raw binary or .npy.

Exit status: 0 success, 1 bad data (corrupt stream, unreadable file, failed --verify),
2 bad usage (options, missing input, file size not matching --dtype/--shape), 130 interrupted.
Errors are reported as one ``amrzip: error: ...`` line on stderr.
"""

from __future__ import annotations

import json
import math
import sys
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

import click
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

import amrzip
from amrzip import _arrayfile, demo
from amrzip._metrics import max_abs_error, psnr
from amrzip.codec import MODES

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


def _describe_bound(i: dict) -> str:
    """The bound as the user stated it, plus the absolute bound it became when it was not one."""
    text = f"{i['bound_mode']} {i['bound']:g}" + (" dB" if i["bound_mode"] == "psnr" else "")
    return text if i["bound_mode"] == "abs" else f"{text} (abs {i['abs_bound']:.6g})"


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
    """Error-bounded lossy compression of float32/float64 arrays (raw binary or .npy)."""


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
@click.option("--verify", is_flag=True, help="Decompress the result and check the error bound (and a --psnr target).")
@_force_option
def compress(
    input_path, output, dtype, shape, byteorder, abs_bound, rel_bound, ratio_target, psnr_target, mode, threads, verify, force
):
    """Compress INPUT (.npy, or raw binary described by --dtype and --shape) under an error bound
    given by exactly one of --abs, --rel, --ratio and --psnr (the last two search for the bound
    meeting a compression ratio or a PSNR)."""
    bounds = {"abs": abs_bound, "rel": rel_bound, "ratio": ratio_target, "psnr": psnr_target}
    if sum(v is not None for v in bounds.values()) != 1:
        raise click.UsageError("give exactly one error bound: --abs, --rel, --ratio or --psnr")
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
        click.echo(f"amrzip: warning: {' '.join(str(w.message).split())}", err=True)
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
    """Decompress the amrzip stream INPUT to raw binary or .npy."""
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


@cli.command()
@click.argument("input_path", metavar="INPUT", type=_input_path)
@click.option("--json", "as_json", is_flag=True, help="Print the full description as JSON.")
def info(input_path, as_json):
    """Describe the amrzip stream INPUT without decompressing it."""
    _, i = _read_stream(input_path)
    if as_json:
        click.echo(json.dumps(i, indent=2))
        return
    predictors = ", ".join(f"{name} ({n} chunk{'s' * (n != 1)})" for name, n in i["chunks_per_predictor"].items())
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
def demo_command(size, seed, threads):
    """Compress a built-in turbulence-like field in both modes at rel 1e-3 and 1e-4 and tabulate
    ratio, accuracy and throughput."""
    results = demo.run(size, seed, threads)
    if any(not r.error_over_bound <= 1.0 for r in results):
        raise click.ClickException("the error bound was exceeded")


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
