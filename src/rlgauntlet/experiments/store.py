"""SQLite results store: one row per run, one per episode, written as episodes finish, and
run-level metrics beside them.

A run is one evaluation (agent × env × threat spec × seed × acting mode), or a calibration,
certification, OOD, training or strongest-of run (``runs.kind``; a strongest-of run
names its member evaluations in its meta and holds the minimum as metrics). Its ``key`` hashes what determines its
results, so ``--resume`` finds the latest run with the same key and runs only the episodes
it lacks: a killed evaluation loses nothing that finished, and a resumed one duplicates
nothing (``(run_id, episode)`` is the primary key). Results that are not episodes (an
impact, an AUROC with its per-trial values, a certified action rate, a count of search
nodes) are run-level metrics: name, value, unit and an optional per-trial list, one row per
(run, name), written as soon as they are known and replaced when recomputed.

Example:
    >>> store = ResultsStore(":memory:")
    >>> run = store.create_run("k", {"threat": "clean"})
    >>> store.done_episodes(run)
    set()
"""

from __future__ import annotations

import hashlib
import math
import json
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from rlgauntlet.engine.rollout import EpisodeRecord
from rlgauntlet.errors import UserError

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL,
    created REAL NOT NULL,
    meta TEXT NOT NULL,
    wall_seconds REAL NOT NULL DEFAULT 0,
    kind TEXT NOT NULL DEFAULT 'evaluation'
);
CREATE INDEX IF NOT EXISTS runs_key ON runs(key);
CREATE TABLE IF NOT EXISTS metrics (
    run_id INTEGER NOT NULL REFERENCES runs(run_id),
    name TEXT NOT NULL,
    value REAL,
    unit TEXT NOT NULL DEFAULT '',
    trials TEXT,
    written REAL NOT NULL,
    PRIMARY KEY (run_id, name)
);
CREATE TABLE IF NOT EXISTS episodes (
    run_id INTEGER NOT NULL REFERENCES runs(run_id),
    episode INTEGER NOT NULL,
    seed INTEGER NOT NULL,
    episode_return REAL NOT NULL,
    length INTEGER NOT NULL,
    perturbed_steps INTEGER NOT NULL,
    action_checks INTEGER NOT NULL DEFAULT 0,
    action_changes INTEGER NOT NULL,
    linf_sum REAL NOT NULL,
    linf_max REAL NOT NULL,
    l2_sum REAL NOT NULL,
    ssim_sum REAL NOT NULL DEFAULT 0,
    mse_sum REAL NOT NULL DEFAULT 0,
    lpips_sum REAL NOT NULL DEFAULT 0,
    perceptual_steps INTEGER NOT NULL DEFAULT 0,
    wall_seconds REAL NOT NULL,
    world TEXT,
    uncertainty_sum REAL NOT NULL DEFAULT 0,
    uncertainty_max REAL NOT NULL DEFAULT 0,
    uncertainty_steps INTEGER NOT NULL DEFAULT 0,
    uncertainty_series TEXT,
    finished REAL NOT NULL,
    PRIMARY KEY (run_id, episode)
);
"""

EPISODE_FIELDS = (
    "episode", "seed", "episode_return", "length", "perturbed_steps", "action_checks", "action_changes",
    "linf_sum", "linf_max", "l2_sum", "ssim_sum", "mse_sum", "lpips_sum", "perceptual_steps", "wall_seconds",
    "world", "uncertainty_sum", "uncertainty_max", "uncertainty_steps", "uncertainty_series",
)
#: episode fields stored as JSON text
JSON_FIELDS = ("world", "uncertainty_series")
#: the kinds of run a store holds (``selection``: the gauntlet race's episodes, which choose the
#: attacks that run in full and are never reported as evaluations)
RUN_KINDS = ("evaluation", "calibration", "certification", "ood", "training", "strongest_of", "gauntlet", "selection")


#: columns added after the first release: (table, name, type and default, SQL filling old rows)
UPGRADES = (
    ("episodes", "ssim_sum", "REAL NOT NULL DEFAULT 0", None),
    ("episodes", "mse_sum", "REAL NOT NULL DEFAULT 0", None),
    ("episodes", "lpips_sum", "REAL NOT NULL DEFAULT 0", None),
    ("episodes", "perceptual_steps", "INTEGER NOT NULL DEFAULT 0", None),
    # before sampling existed every perturbed step was compared with the clean action
    ("episodes", "action_checks", "INTEGER NOT NULL DEFAULT 0", "UPDATE episodes SET action_checks = perturbed_steps"),
    ("episodes", "world", "TEXT", None),  # world threats: what the episode's env was set to
    ("runs", "kind", "TEXT NOT NULL DEFAULT 'evaluation'", None),  # every older run is an evaluation
    # OOD detection: the agent's per-step uncertainty (summary, and the series when kept)
    ("episodes", "uncertainty_sum", "REAL NOT NULL DEFAULT 0", None),
    ("episodes", "uncertainty_max", "REAL NOT NULL DEFAULT 0", None),
    ("episodes", "uncertainty_steps", "INTEGER NOT NULL DEFAULT 0", None),
    ("episodes", "uncertainty_series", "TEXT", None),
)


#: ``PRAGMA application_id`` of our stores ("RLGT"); ``user_version`` is the schema version
APPLICATION_ID = 0x524C4754
SCHEMA_VERSION = 3
#: the tables an rlgauntlet store holds (stores from before the marking hold a subset)
OUR_TABLES = {"runs", "episodes", "metrics", "sqlite_sequence"}


def check_is_our_store(path: Path, hint: str = "give a new file name (it is created) or a store rlgauntlet wrote") -> None:
    """Refuse, without writing a byte, a file that is not an rlgauntlet store: not SQLite at all,
    or SQLite marked by another application or holding other tables. ``hint``: the fix (a command
    that only reads a store cannot be given a new file)."""
    from rlgauntlet.errors import UserError

    try:
        probe = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True, timeout=30.0)
        try:
            app_id = probe.execute("PRAGMA application_id").fetchone()[0]
            tables = {r[0] for r in probe.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            runs_columns = {r[1] for r in probe.execute("PRAGMA table_info(runs)")}
        finally:
            probe.close()
    except sqlite3.DatabaseError as exc:
        raise UserError(f"--store {path} is not an SQLite results store ({exc}); {hint}") from None
    if app_id == APPLICATION_ID:
        return
    legacy = app_id == 0 and "runs" in tables and tables <= OUR_TABLES and {"run_id", "key", "meta"} <= runs_columns
    if not legacy and (tables or app_id):
        raise UserError(f"--store {path} is an SQLite file rlgauntlet did not write (tables: "
                        f"{', '.join(sorted(tables)) or 'none'}); it was left untouched; {hint}")


def check_store_location(path: str | Path) -> Path:
    """Refuse, without creating or changing anything, a --store that is a directory, a file we did
    not write, or a place that cannot be written."""
    from rlgauntlet.common.outputs import check_run_dir

    path = Path(path)
    if path.is_dir():
        raise UserError(f"--store {path} is a directory; give a file name, e.g. --store {path}/results.sqlite")
    if path.is_file() and path.stat().st_size > 0:
        check_is_our_store(path)
    check_run_dir(path.parent, f"--store {path}: its folder")
    return path


def open_existing_store(path: str | Path, option: str = "--store") -> "ResultsStore":
    """Open a store a command only reads (report, leaderboard, plot): it must already be one. A
    missing path, a directory, an empty file or a file of another program is refused with one
    line, and nothing is created or changed (opening an empty file as a store would make it one)."""
    from rlgauntlet.errors import UserError

    path = Path(path)
    fix = "give a results store written by evaluate, sweep or gauntlet"
    if not path.is_file():
        raise UserError(f"{option} {path} {'is a directory' if path.is_dir() else 'does not exist'}; {fix}")
    if path.stat().st_size == 0:
        raise UserError(f"{option} {path} is an empty file (0 bytes), not a results store; it was left untouched; {fix}")
    check_is_our_store(path, fix)
    return ResultsStore(path)


@contextmanager
def store_of(store: "str | Path | ResultsStore | None") -> Iterator["ResultsStore"]:
    """The results store a job works with: the caller's open ``ResultsStore`` (borrowed: left
    open), or one opened from a path here and closed at the end (in memory for None)."""
    if isinstance(store, ResultsStore):
        yield store
        return
    owned = ResultsStore(store if store is not None else ":memory:")
    try:
        yield owned
    finally:
        owned.close()


def run_key(identity: dict) -> str:
    """Stable hash of what determines a run's episodes."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


class ResultsStore:
    """The SQLite file holding every run and episode."""

    def __init__(self, path: str | Path) -> None:
        from rlgauntlet.errors import UserError

        self.path = str(path)
        if not self.path.strip():
            raise UserError("--store is empty; give a file name, e.g. --store results.sqlite")
        if self.path != ":memory:":
            file = check_store_location(self.path)
            try:
                file.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UserError(f"--store {file}: cannot create its folder ({exc.strerror})") from None
        try:
            self.conn = sqlite3.connect(self.path, timeout=60.0)
            self.conn.execute("PRAGMA busy_timeout = 60000")
            self.conn.execute("PRAGMA journal_mode=WAL")
            self._add_missing_columns()
            self.conn.executescript(SCHEMA)
            # set only what differs: rewriting a pragma with its own value still changes the file
            # (its change counter), and reading a store (plot, report) must leave it byte-identical
            if self.conn.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
                self.conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            if self.conn.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
                self.conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            self.conn.commit()
        except sqlite3.Error as exc:
            raise UserError(f"--store {self.path}: cannot open it for writing ({exc})") from None

    def _add_missing_columns(self) -> None:
        """Upgrade a store written by an older version: add the columns it lacks (with their
        defaults) so that its runs stay readable and resumable."""
        for table, name, sql_type, fill in UPGRADES:
            have = {row[1] for row in self.conn.execute(f"PRAGMA table_info({table})")}
            if have and name not in have:  # an empty set: the table is new and gets the full schema
                self.conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {sql_type}")
                if fill:
                    self.conn.execute(fill)

    def close(self) -> None:
        self.conn.close()

    def create_run(self, key: str, meta: dict, kind: str = "evaluation") -> int:
        if kind not in RUN_KINDS:
            raise ValueError(f"unknown run kind {kind!r}; one of {RUN_KINDS}")
        cur = self.conn.execute(
            "INSERT INTO runs (key, created, meta, kind) VALUES (?, ?, ?, ?)", (key, time.time(), json.dumps(meta), kind)
        )
        self.conn.commit()
        return int(cur.lastrowid)

    def run_kind(self, run_id: int) -> str:
        return str(self.conn.execute("SELECT kind FROM runs WHERE run_id = ?", (run_id,)).fetchone()[0])

    def add_metric(self, run_id: int, name: str, value: float | None, unit: str = "",
                   trials: list[float] | None = None) -> None:
        """Write (or replace) one run-level metric and commit at once."""
        self.conn.execute(
            "INSERT OR REPLACE INTO metrics (run_id, name, value, unit, trials, written) VALUES (?, ?, ?, ?, ?, ?)",
            (run_id, name, None if value is None else float(value), unit,
             None if trials is None else json.dumps([float(t) for t in trials]), time.time()),
        )
        self.conn.commit()

    def metrics(self, run_id: int) -> dict[str, dict]:
        """The run's metrics: name -> {"value", "unit", "trials"} (trials None when not per-trial)."""
        rows = self.conn.execute("SELECT name, value, unit, trials FROM metrics WHERE run_id = ? ORDER BY name",
                                 (run_id,)).fetchall()
        return {name: {"value": value, "unit": unit, "trials": None if trials is None else json.loads(trials)}
                for name, value, unit, trials in rows}

    def last_written(self, run_id: int) -> float:
        """When the run's metrics were last written (seconds since the epoch; its creation time when
        it has none): a result computed again rewrites its metrics in the same run."""
        row = self.conn.execute("SELECT MAX(written) FROM metrics WHERE run_id = ?", (run_id,)).fetchone()
        if row[0] is not None:
            return float(row[0])
        return float(self.conn.execute("SELECT created FROM runs WHERE run_id = ?", (run_id,)).fetchone()[0])

    def latest_run(self, key: str) -> int | None:
        row = self.conn.execute("SELECT MAX(run_id) FROM runs WHERE key = ?", (key,)).fetchone()
        return None if row[0] is None else int(row[0])

    def _corrupt(self, what: str) -> UserError:
        return UserError(f"--store {self.path} is damaged: {what}; re-run into a new --store (or restore the file "
                         "from a copy)")

    def _meta(self, run_id: int, text: str) -> dict:
        try:
            meta = json.loads(text)
        except (TypeError, ValueError):
            meta = None
        if not isinstance(meta, dict):
            raise self._corrupt(f"run {run_id} has an unreadable description")
        return meta

    def run_meta(self, run_id: int) -> dict:
        row = self.conn.execute("SELECT meta FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return self._meta(run_id, row[0])

    def runs(self, kind: str | None = None) -> list[tuple[int, dict]]:
        """Every run (of ``kind``, when given) as (run_id, meta), oldest first."""
        sql, args = "SELECT run_id, meta FROM runs", ()
        if kind is not None:
            sql, args = sql + " WHERE kind = ?", (kind,)
        rows = self.conn.execute(sql + " ORDER BY run_id", args).fetchall()
        return [(int(r[0]), self._meta(int(r[0]), r[1])) for r in rows]

    def add_wall_seconds(self, run_id: int, seconds: float) -> None:
        self.conn.execute("UPDATE runs SET wall_seconds = wall_seconds + ? WHERE run_id = ?", (seconds, run_id))
        self.conn.commit()

    def wall_seconds(self, run_id: int) -> float:
        return float(self.conn.execute("SELECT wall_seconds FROM runs WHERE run_id = ?", (run_id,)).fetchone()[0])

    def add_episode(self, run_id: int, record: EpisodeRecord) -> None:
        """Insert one finished episode and commit at once (a kill loses nothing finished); an
        episode already stored (by a concurrent writer) is left as it is."""
        values = [getattr(record, f) for f in EPISODE_FIELDS]
        for name in JSON_FIELDS:
            value = getattr(record, name)
            values[EPISODE_FIELDS.index(name)] = None if value is None else json.dumps(value)
        # two processes resuming one run may both finish an episode: it is kept once, whoever wrote it
        self.conn.execute(
            f"INSERT INTO episodes (run_id, {', '.join(EPISODE_FIELDS)}, finished) "
            f"VALUES (?, {', '.join('?' * len(EPISODE_FIELDS))}, ?) ON CONFLICT (run_id, episode) DO NOTHING",
            [run_id, *values, time.time()],
        )
        self.conn.commit()

    def done_episodes(self, run_id: int) -> set[int]:
        rows = self.conn.execute("SELECT episode FROM episodes WHERE run_id = ?", (run_id,))
        return {int(r[0]) for r in rows}

    def episodes(self, run_id: int, limit: int | None = None) -> list[EpisodeRecord]:
        """Episode records of a run, ordered by episode index (the first ``limit`` indices)."""
        sql = f"SELECT {', '.join(EPISODE_FIELDS)} FROM episodes WHERE run_id = ? ORDER BY episode"
        rows = self.conn.execute(sql, (run_id,)).fetchall()
        records = []
        for row in rows:
            fields = dict(zip(EPISODE_FIELDS, row))
            try:
                fields.update({k: None if fields[k] is None else json.loads(fields[k]) for k in JSON_FIELDS})
            except (TypeError, ValueError):
                raise self._corrupt(f"episode {fields['episode']} of run {run_id} has unreadable fields") from None
            if not isinstance(fields["episode_return"], (int, float)) or not math.isfinite(fields["episode_return"]):
                raise self._corrupt(f"episode {fields['episode']} of run {run_id} has the return "
                                    f"{fields['episode_return']!r}, not a finite number")
            records.append(EpisodeRecord(**fields))
        return records if limit is None else [r for r in records if r.episode < limit]
