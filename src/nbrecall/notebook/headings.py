"""Markdown headings of notebook cells: the one rule for what a heading line is and for the heading path
(`Ballast › Aft tanks`) above each cell, shared by the chunker (chunk headings, facts) and the answerer (where a
cell sits, MCP cell views).

ATX headings only (`#` to `######`, up to three spaces of indent), read line by line. Not markdown-it: it would
also take setext headings (`Title` over `===`) and leave out `#` lines inside fenced code, which changes the
chunk headings of the indexed archives; that is a change to measure on both development sets, not a refactor.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nbrecall.notebook.model import Cell

HEADING_LINE = re.compile(r"^\s{0,3}(#{1,6})\s+(.+?)\s*#*\s*$")


def heading_line(line: str) -> tuple[int, str] | None:
    """(level, text) when `line` is a heading line."""
    match = HEADING_LINE.match(line)
    return (len(match.group(1)), match.group(2).strip()) if match else None


def leading_heading(source: str) -> tuple[int, str] | None:
    """(level, text) when a markdown source's first non-blank line is a heading."""
    for line in source.splitlines():
        if line.strip():
            return heading_line(line)
    return None


def heading_of(cell: Cell) -> tuple[int, str] | None:
    """(level, text) when a markdown cell starts with a heading line."""
    return leading_heading(cell.source) if cell.is_markdown else None


def heading_paths(cells: Iterable[tuple[int, bool, str]]) -> dict[int, str]:
    """Every cell's heading path from `(index, is_markdown, source)` in notebook order: every heading line of the
    markdown above it; a heading cell's own path ends with its last heading."""
    stack: list[tuple[int, str]] = []
    paths: dict[int, str] = {}
    for index, is_markdown, source in cells:
        if is_markdown:
            for line in source.splitlines():
                heading = heading_line(line)
                if heading:
                    while stack and stack[-1][0] >= heading[0]:
                        stack.pop()
                    stack.append(heading)
        paths[index] = " › ".join(text for _, text in stack)
    return paths
