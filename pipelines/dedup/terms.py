"""The words the dedup outputs use, defined once (docs/architecture.md, "Dedup glossary").

Every report, manifest and reason column says :data:`CHAINED` for a member that is in its
group only because it is similar to another member, and explains it with
:data:`CHAINED_MEANING`.
"""

from __future__ import annotations

# A removed member whose own similarity to the kept row (the representative) is under the
# threshold, or not among the pairs: it is in the group because it is similar to another
# member, which is similar to the kept row (or to a further member). Components make them;
# a star never does.
CHAINED = "chained"
CHAINED_MEANING = (
    "in the group only because it is similar to another member, not to the kept row: its own "
    "similarity to the kept row is under the threshold or not among the pairs"
)
