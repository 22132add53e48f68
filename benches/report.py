"""Markdown output shared by the benchmark scripts."""

from __future__ import annotations

import math


def fmt(v, spec=".2f") -> str:
    """A number for a table cell: '-' when missing or NaN, 'inf' when infinite."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return format(v, spec)


def geomean(xs) -> float:
    """Geometric mean of the positive finite numbers among ``xs`` (None, NaN and the rest left out); NaN for none."""
    xs = [x for x in xs if x is not None and math.isfinite(x) and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table with padded columns."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])
