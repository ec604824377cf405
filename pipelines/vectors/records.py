"""A dataclass as a JSON-ready record: the one way a result object writes its manifest entry.

Results (a k-means fit, a sweep point, an index plan, ...) keep short attribute names in code
and spell some of them out in the manifest; :func:`field_record` builds the record from the
dataclass's fields in their declared order, so a new field reaches the manifest without a second
list to keep in step. Pure Python: any pipelines package may use it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import fields
from typing import Any


def field_record(
    obj: Any,
    rename: Mapping[str, str] | None = None,
    *,
    skip: Collection[str] = (),
    **values: Any,
) -> dict[str, Any]:
    """The fields of the dataclass instance ``obj`` as a dict, in declaration order.

    Args:
        obj: a dataclass instance.
        rename: manifest key of a field whose key is not its attribute name.
        skip: fields left out (arrays, histories: what the manifest does not record).
        values: the value recorded for a field instead of the attribute itself (by attribute
            name), e.g. a nested result written as its own record.
    """
    rename = rename or {}
    unknown = (set(rename) | set(skip) | set(values)) - {f.name for f in fields(obj)}
    if unknown:
        raise TypeError(f"{type(obj).__name__} has no field(s) {sorted(unknown)}")
    return {
        rename.get(f.name, f.name): values[f.name] if f.name in values else getattr(obj, f.name)
        for f in fields(obj)
        if f.name not in skip
    }
