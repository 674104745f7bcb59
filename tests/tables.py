"""Reading the text tables of ``chainrule explain`` back into cells."""

from __future__ import annotations


def cells(table: str) -> list[dict[str, str]]:
    """One dict per row, column name -> cell, split where the rule line
    under the header has its gaps (cells may contain single spaces)."""
    lines = table.splitlines()
    header, rule, rows = lines[0], lines[1], lines[2:]
    spans = []
    start = 0
    for dashes in rule.split("  "):
        spans.append((start, start + len(dashes)))
        start += len(dashes) + 2
    spans[-1] = (spans[-1][0], None)  # type: ignore[assignment]
    names = [header[a:b].strip() for a, b in spans]
    return [{n: row[a:b].strip() for n, (a, b) in zip(names, spans)} for row in rows]


def grads(table: str) -> dict[str, str]:
    """node -> its grad cell."""
    return {row["node"]: row["grad"] for row in cells(table)}
