"""Pieces of the SQL the PostgreSQL store and manifest send: filters as a condition with named parameters, lexemes
as a tsquery, upserts. Apart from the store so that what reaches PostgreSQL as SQL text (and how it is quoted) is
in one short module that can be read and tested on its own; `index.lance_schema.lance_where` is the LanceDB twin
of the filter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nbrecall.records import SearchFilters


def filter_sql(filters: SearchFilters) -> tuple[str, dict[str, Any]]:
    """`SearchFilters` as an SQL condition on `chunks` with named parameters (as `lance_schema.lance_where`)."""
    clauses: list[str] = []
    params: dict[str, Any] = {}
    if filters.year_from is not None:
        clauses.append("year >= %(f_year_from)s")
        params["f_year_from"] = int(filters.year_from)
    if filters.year_to is not None:
        clauses.append("year <= %(f_year_to)s")
        params["f_year_to"] = int(filters.year_to)
    if filters.project:
        clauses.append("project = %(f_project)s")
        params["f_project"] = filters.project
    if filters.author:
        clauses.append("strpos(lower(author), %(f_author)s) > 0")
        params["f_author"] = filters.author.lower()
    if filters.tag:
        clauses.append("%(f_tag)s = ANY(tags)")
        params["f_tag"] = filters.tag
    if not filters.include_deprecated:
        clauses.append("NOT deprecated")
    if filters.kinds:
        clauses.append("kind = ANY(%(f_kinds)s)")
        params["f_kinds"] = list(filters.kinds)
    if filters.notebooks is not None:
        clauses.append("nb_sha = ANY(%(f_notebooks)s)")
        params["f_notebooks"] = list(filters.notebooks)
    return " AND ".join(clauses) or "TRUE", params


def tsquery_literal(lexemes: list[str]) -> str:
    """An OR of lexemes as tsquery input: each quoted, so no lexeme is re-parsed or read as an operator."""
    quoted = ("'" + lex.replace("\\", "\\\\").replace("'", "''") + "'" for lex in lexemes)
    return " | ".join(quoted)


def upsert_sql(table: str, columns: Sequence[str], key: Sequence[str]) -> str:
    """`INSERT INTO table (columns) VALUES (%s, ...)` that, on a row with the same `key`, updates every other column
    to the new values (`executemany` with one tuple per row, in `columns` order)."""
    update = ", ".join(f"{c} = EXCLUDED.{c}" for c in columns if c not in key)
    return (f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))}) "
            f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {update}")
