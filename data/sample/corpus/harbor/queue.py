"""Durable job queue on SQLite: enqueue, lease, acknowledge, fail.

Jobs become visible again when their lease expires, so a crashed worker never loses work.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from dataclasses import dataclass

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    queue TEXT NOT NULL,
    payload TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    visible_at REAL NOT NULL
)
"""


@dataclass
class Job:
    id: str
    queue: str
    payload: dict
    attempts: int


class JobQueue:
    """A named queue in one SQLite file, safe for many worker processes."""

    def __init__(self, path: str, name: str, lease_seconds: float = 30.0, max_attempts: int = 5):
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute(SCHEMA)
        self.name = name
        self.lease_seconds = lease_seconds
        self.max_attempts = max_attempts

    def enqueue(self, payload: dict, delay: float = 0.0) -> str:
        """Add a job; it becomes visible to workers after `delay` seconds."""
        job_id = uuid.uuid4().hex
        self.db.execute(
            "INSERT INTO jobs (id, queue, payload, visible_at) VALUES (?, ?, ?, ?)",
            (job_id, self.name, json.dumps(payload), time.time() + delay),
        )
        return job_id

    def lease(self) -> Job | None:
        """Take the oldest visible job and hide it for one lease period.

        The UPDATE ... RETURNING runs in one statement, so two workers can never lease the
        same job: SQLite serializes writers.
        """
        now = time.time()
        row = self.db.execute(
            "UPDATE jobs SET visible_at = ?, attempts = attempts + 1 "
            "WHERE id = (SELECT id FROM jobs WHERE queue = ? AND visible_at <= ? "
            "ORDER BY visible_at LIMIT 1) RETURNING id, payload, attempts",
            (now + self.lease_seconds, self.name, now),
        ).fetchone()
        if row is None:
            return None
        return Job(row[0], self.name, json.loads(row[1]), row[2])

    def ack(self, job: Job) -> None:
        """The job succeeded: delete it for good."""
        self.db.execute("DELETE FROM jobs WHERE id = ?", (job.id,))

    def fail(self, job: Job, delay: float) -> None:
        """The job failed: retry after `delay`, or dead-letter it after max_attempts."""
        if job.attempts >= self.max_attempts:
            self.db.execute("UPDATE jobs SET queue = ? WHERE id = ?", (self.name + ".dead", job.id))
        else:
            self.db.execute("UPDATE jobs SET visible_at = ? WHERE id = ?",
                            (time.time() + delay, job.id))

    def depth(self) -> int:
        """Number of jobs waiting or leased in this queue (dead letters excluded)."""
        return self.db.execute("SELECT COUNT(*) FROM jobs WHERE queue = ?", (self.name,)).fetchone()[0]
