"""The RunInference handler for pairs on a TestPipeline: keyed pairs come back with the
cross-encoder's scores (the same as ``CrossEncoder.predict`` on the pairs), one model load."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
from apache_beam.ml.inference.base import KeyedModelHandler, RunInference
from apache_beam.testing.util import assert_that
from sbert_pipeline.verify.model_handler import CrossEncoderModelHandler, CrossEncoderSettings
from verify_data import TEXTS, local_runner

from sbert_core import CrossEncoder

PAIRS = [(TEXTS[i], TEXTS[(i * 7 + 3) % len(TEXTS)]) for i in range(len(TEXTS))]


def test_keyed_pairs_get_the_scores_of_predict(cross_encoder_dir):
    settings = CrossEncoderSettings(str(cross_encoder_dir), device="cpu", batch_size=5)
    expected = CrossEncoder.load(cross_encoder_dir, device="cpu").predict(PAIRS, batch_size=3)

    def check(results):
        got = dict((key, result.inference) for key, result in results)
        assert sorted(got) == list(range(len(PAIRS)))
        np.testing.assert_allclose([got[i] for i in range(len(PAIRS))], expected, atol=1e-6)
        assert all(result.example == PAIRS[key] for key, result in results)

    with local_runner() as pipeline:
        scored = (
            pipeline
            | beam.Create(list(enumerate(PAIRS)))
            | RunInference(KeyedModelHandler(CrossEncoderModelHandler(settings)))
        )
        assert_that(scored, check)


def test_batching_and_sharing_follow_the_device(cross_encoder_dir):
    cpu = CrossEncoderModelHandler(CrossEncoderSettings("m", device="cpu"), max_batch_size=64)
    assert cpu.batch_elements_kwargs()["max_batch_size"] == 64
    assert not cpu.share_model_across_processes()
    gpu = CrossEncoderModelHandler(CrossEncoderSettings("m", device="cuda:0"))
    assert gpu.share_model_across_processes()
    assert cpu.get_num_bytes([("ab", "cde")]) == 5
