"""Fault injection for Prefect's temporary server (put this folder on PYTHONPATH and name a file in
SITUATE_TEST_HELD_COMMIT): the automations' periodic evaluation, which Prefect's server runs every
5 s whether or not there are automations, never finishes returning the connection of its first
commit. That is the moment a loaded machine sometimes catches it in when the command ends: a
server then asked to shut down cancels it there, and SQLAlchemy logs `Exception during reset or
similar` with a traceback on the command's stderr. The file gets one line when the hold begins,
so a test knows the race was set up.

Only the temporary server's process is touched (Prefect starts it with PREFECT__SERVER_EPHEMERAL
set); every other Python process on this PYTHONPATH runs unchanged.
"""

import os

if os.environ.get("PREFECT__SERVER_EPHEMERAL") and os.environ.get("SITUATE_TEST_HELD_COMMIT"):
    import asyncio

    import aiosqlite.core

    _rollback = aiosqlite.core.Connection.rollback
    _held: list[str] = []

    async def _rollback_held(self):  # type: ignore[no-untyped-def]
        task = asyncio.current_task()
        coro = task.get_coro() if task is not None else None
        if not _held and getattr(coro, "__qualname__", "") == "evaluate_periodically":
            _held.append("held")
            with open(os.environ["SITUATE_TEST_HELD_COMMIT"], "a") as note:
                note.write("held the periodic evaluation's connection reset\n")
            await asyncio.Event().wait()  # until the task is cancelled (or the process killed)
        return await _rollback(self)

    aiosqlite.core.Connection.rollback = _rollback_held
