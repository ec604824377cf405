"""The clustered search's progress line, drawn by the launcher: it counts the markers the
searched block groups leave (``_work/searched/group-G.json``, see
:mod:`sbert_pipeline.pairs.transforms`) while the pipeline runs.

The workers of a local runner may be threads or processes of their own (``--direct_running_mode
multi_processing``), where progress is off (:mod:`sbert_pipeline.vectors.progress`); the files they
leave reach the launcher either way, so the line shows on the user's terminal: groups searched,
of how many, the rate and the ETA.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sbert_pipeline.io.filesystems import FileSystems
from sbert_pipeline.io.output_dir import join
from sbert_pipeline.pairs.settings import SEARCHED_DIR, WORK_DIR
from sbert_pipeline.vectors.progress import stage_progress

# Seconds between two listings of the markers: cheap locally, a few requests on an object store.
POLL_SECONDS = 1.0
DESCRIPTION = "pairs: block groups searched"


def searched_groups(output: str) -> int:
    """How many block groups of the run writing into ``output`` have been searched."""
    pattern = join(output, WORK_DIR, SEARCHED_DIR, "group-*.json")
    return len(FileSystems.match([pattern])[0].metadata_list)


@contextmanager
def group_progress(output: str, groups: int, poll: float = POLL_SECONDS) -> Iterator[None]:
    """Show ``groups searched/groups`` while the block works (a thread lists the markers every
    ``poll`` seconds, and once more at the end); nothing where this process shows no progress."""
    bar = stage_progress(DESCRIPTION, total=groups, unit="groups")
    if not bar.enabled:
        yield
        return
    done = threading.Event()

    def catch_up() -> None:
        # Markers of a retried group are rewritten under the same name: counted once.
        found = min(searched_groups(output), groups)
        if found > bar.count:
            bar.update(found - bar.count)

    def watch() -> None:
        while not done.wait(poll):
            catch_up()

    # The clock starts at the first group searched (not here): the vectors are routed to their
    # blocks before any group is searched, and counting that time would make the first ETAs
    # far too long.
    watcher = threading.Thread(target=watch, name="pairs-progress", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
        catch_up()
        bar.close()
