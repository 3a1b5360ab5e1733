"""History files as older versions of the app wrote them, for the migration tests."""

import sqlite3
from pathlib import Path

from app.state.history_schema import MIGRATIONS


def version_3_history(path: Path) -> sqlite3.Connection:
    """An empty history of schema 3 (before title_by and finished) at `path`, open for the test to fill;
    the test commits and closes it before the app's History opens it."""
    db = sqlite3.connect(str(path))
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    for version in (1, 2, 3):
        for statement in MIGRATIONS[version]:
            db.execute(statement)
    db.execute("INSERT INTO meta VALUES ('schema_version', '3')")
    return db
