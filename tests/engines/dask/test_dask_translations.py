"""Reshuffle and GroupByKey on Beam's Dask runner spread a bag over --dask_npartitions (Beam's
own translation keeps a one-file corpus in one partition, on one worker)."""

from __future__ import annotations

import dask.bag as db
from apache_beam.runners.dask import transform_evaluator
from apache_beam.runners.dask.overrides import _GroupByKeyOnly, _Reshuffle
from sbert_pipeline.stage_api.dask_translations import (
    SpreadGroupByKey,
    SpreadReshuffle,
    register_translations,
    spread,
)


def test_a_bag_of_fewer_partitions_is_split_into_as_many_as_asked():
    bag = db.from_sequence(range(10), npartitions=1)
    spread_bag = spread(bag, {"npartitions": 4})
    assert spread_bag.npartitions == 4
    assert sorted(spread_bag.compute(scheduler="sync")) == list(range(10))
    many = db.from_sequence(range(10), npartitions=5)
    assert spread(many, {"npartitions": 4}) is many  # nothing moves
    assert spread(bag, {}) is bag  # no partitioning given (--dask_partition_size)


def test_registered_for_reshuffle_and_group_by_key():
    register_translations()
    assert transform_evaluator.TRANSLATIONS[_Reshuffle] is SpreadReshuffle
    assert transform_evaluator.TRANSLATIONS[_GroupByKeyOnly] is SpreadGroupByKey
