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


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table with padded columns."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])
