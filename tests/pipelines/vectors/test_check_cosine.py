"""vectors/checks.check_cosine: the one threshold range check of every stage and job."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sbert_pipeline.vectors.checks import check_cosine


@pytest.mark.parametrize("value", [-1, -1.0, 0, 0.5, 1.0, np.float32(0.9), np.float64(-0.25)])
def test_a_cosine_is_returned_as_a_float(value):
    checked = check_cosine(value)
    assert type(checked) is float and checked == float(value)


@pytest.mark.parametrize("value", [math.nan, np.float32("nan"), math.inf, 1.0001, -1.5, True])
def test_values_outside_or_nan_are_refused(value):
    with pytest.raises(ValueError, match=r"threshold must lie in \[-1, 1\] \(a cosine\), got"):
        check_cosine(value)


@pytest.mark.parametrize("value", ["0.5", None, [0.5]])
def test_non_numbers_are_refused_by_name(value):
    with pytest.raises(ValueError, match="--threshold must lie in"):
        check_cosine(value, "--threshold")


def test_upper_open_refuses_one():
    assert check_cosine(0.99, "histogram low end", upper_open=True) == 0.99
    with pytest.raises(ValueError, match=r"histogram low end must lie in \[-1, 1\) .*got 1.0"):
        check_cosine(1.0, "histogram low end", upper_open=True)
