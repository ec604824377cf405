"""SbertModelHandler in a user's own pipeline: RunInference on texts and on keyed texts."""

from __future__ import annotations

import numpy as np
import pytest
from apache_beam import Create, Map
from apache_beam.ml.inference.base import KeyedModelHandler, PredictionResult, RunInference
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to
from sbert_pipeline.embed.model_handler import Embedding, SbertModelHandler, example_text


def close_to(expected: dict, key_of):
    """A matcher: one result per expected key, each vector equal to the encoder's (1e-6)."""

    def check(results):
        found = {key_of(result): result for result in results}
        assert set(found) == set(expected), (sorted(found), sorted(expected))
        for key, result in found.items():
            assert isinstance(result, PredictionResult), type(result)
            assert isinstance(result.inference, Embedding), result.inference
            assert np.abs(result.inference.vector - expected[key]).max() <= 1e-6, key

    return check


def test_run_inference_on_plain_strings(tiny_st_dir, tiny_encoder, sample_texts):
    expected = dict(zip(sample_texts, tiny_encoder.encode(sample_texts), strict=True))
    with BeamTestPipeline(runner="FnApiRunner", is_integration_test=False, blocking=True) as p:
        results = (
            p
            | Create(sample_texts)
            | RunInference(SbertModelHandler(str(tiny_st_dir), min_batch_size=3, max_batch_size=4))
        )
        # The example comes back as given: the str itself.
        assert_that(results, close_to(expected, key_of=lambda result: result.example))


def test_keyed_model_handler_keeps_the_keys(tiny_st_dir, tiny_encoder, sample_texts):
    keyed = [(f"doc-{i}", text) for i, text in enumerate(sample_texts)]
    vectors = tiny_encoder.encode(sample_texts)
    expected = {key: vectors[i] for i, (key, _) in enumerate(keyed)}
    handler = KeyedModelHandler(SbertModelHandler(str(tiny_st_dir)))
    with BeamTestPipeline(runner="FnApiRunner", is_integration_test=False, blocking=True) as p:
        # Each output is (key, PredictionResult(text, Embedding)), as Beam's keyed handlers give.
        results = p | Create(keyed) | RunInference(handler)
        assert_that(results | "Keys" >> Map(lambda pair: pair[0]), equal_to(list(expected)))
        assert_that(
            results | "Results" >> Map(lambda pair: pair[1]),
            close_to(dict(zip(sample_texts, vectors, strict=True)), key_of=example_text_of),
            label="Vectors",
        )


def example_text_of(result: PredictionResult) -> str:
    return result.example


def test_key_text_tuples_come_back_as_given(tiny_st_dir, tiny_encoder, sample_texts):
    handler = SbertModelHandler(str(tiny_st_dir))
    examples = [(i, text) for i, text in enumerate(sample_texts[:3])]
    results = list(handler.run_inference(examples, handler.load_model()))
    assert [result.example for result in results] == examples
    expected = tiny_encoder.encode(sample_texts[:3])
    vectors = np.stack([result.inference.vector for result in results])
    assert np.abs(vectors - expected).max() <= 1e-6


@pytest.mark.parametrize("bad", [3, ("a", "b", "c"), ("key", 7), None])
def test_other_examples_are_refused_naming_the_type(bad):
    with pytest.raises(TypeError, match="SbertModelHandler embeds str, \\(key, text\\) tuples"):
        example_text(bad)
