"""The head of the markdown tables the benchmark reports write, so a table's separator row always has
as many columns as its names. Imported as a sibling (the scripts run as files)."""

from __future__ import annotations


def table_head(*columns: str) -> list[str]:
    """The first two lines of a markdown table: the column names, then the separator row."""
    return [table_row(*columns), "|" + "---|" * len(columns)]


def table_row(*cells) -> str:
    """One row of a markdown table, each cell as str() writes it (format numbers before)."""
    return "| " + " | ".join(str(c) for c in cells) + " |"
