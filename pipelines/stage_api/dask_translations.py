"""Beam's Dask runner, spreading the work over the cluster's workers.

Beam's Dask runner turns a pipeline into ``dask.bag`` operations: ``Create`` makes a bag of
``--dask_npartitions`` partitions, a ``ParDo`` runs once per partition, and a ``GroupByKey``
keeps the number of partitions of its input. ``Reshuffle`` is translated as nothing at all. So
a pipeline that starts from one corpus file (one element of ``Create``) runs every step in one
partition, on one worker, however many the cluster has.

:func:`register_translations` makes ``Reshuffle`` and ``GroupByKey`` what they are on the other
runners, a redistribution: a bag of fewer partitions than ``--dask_npartitions`` is split into
that many first. Registered when a pipeline's options name the Dask runner, in the process that
builds the pipeline (the translation happens there, before the graph is sent to the scheduler).
"""

from __future__ import annotations

from typing import Any

from apache_beam.runners.dask import transform_evaluator
from apache_beam.runners.dask.overrides import _GroupByKeyOnly, _Reshuffle


def spread(bag: Any, bag_kwargs: dict) -> Any:
    """``bag`` split into ``--dask_npartitions`` partitions when it has fewer (a partition is
    split into contiguous pieces; nothing moves when it already has as many)."""
    wanted = bag_kwargs.get("npartitions")
    if not wanted or bag.npartitions >= wanted:
        return bag
    return bag.repartition(npartitions=wanted)


class SpreadReshuffle(transform_evaluator.DaskBagOp):
    """``Reshuffle``: the bag spread over the partitions."""

    def apply(self, input_bag: Any, side_inputs: Any = None) -> Any:
        return spread(input_bag, self.bag_kwargs)


class SpreadGroupByKey(transform_evaluator.GroupByKey):
    """``GroupByKey``: the bag spread over the partitions, then grouped as Beam groups it (the
    groups keep the number of partitions of what they group)."""

    def apply(self, input_bag: Any, side_inputs: Any = None) -> Any:
        return super().apply(spread(input_bag, self.bag_kwargs), side_inputs)


def register_translations() -> None:
    """Use the spreading translations for every Dask pipeline built in this process."""
    transform_evaluator.TRANSLATIONS[_Reshuffle] = SpreadReshuffle
    transform_evaluator.TRANSLATIONS[_GroupByKeyOnly] = SpreadGroupByKey
