"""The embed and verify model handlers share one base and still pickle as Beam ships them."""

from __future__ import annotations

from apache_beam.internal import pickler
from sbert_pipeline.embed.model_handler import SbertModelHandler
from sbert_pipeline.stage_api.model_handler_base import SettingsModelHandler
from sbert_pipeline.verify.model_handler import CrossEncoderModelHandler, CrossEncoderSettings

from sbert_core.inference.encoder_settings import EncoderSettings


def test_embed_handler_round_trips_through_beams_pickler():
    handler = SbertModelHandler(EncoderSettings("m", device="cuda:1"), max_batch_size=100)
    copy = pickler.loads(pickler.dumps(handler))
    assert isinstance(copy, SettingsModelHandler)
    assert copy.batch_elements_kwargs() == {"min_batch_size": 4096, "max_batch_size": 100}
    assert copy.share_model_across_processes() is True
    assert copy.get_metrics_namespace() == "sbert"
    assert copy.get_num_bytes(["abc", ("key", "de")]) == 5


def test_verify_handler_round_trips_through_beams_pickler():
    handler = CrossEncoderModelHandler(CrossEncoderSettings("m"), share_across_processes=True)
    copy = pickler.loads(pickler.dumps(handler))
    assert isinstance(copy, SettingsModelHandler)
    assert copy.batch_elements_kwargs() == {"min_batch_size": 256, "max_batch_size": 4096}
    assert copy.share_model_across_processes() is True
    assert copy.get_metrics_namespace() == "sbert_verify"
    assert copy.get_num_bytes([("ab", "c"), ("", "de")]) == 5
    cpu = CrossEncoderModelHandler(CrossEncoderSettings("m", device="cpu"))
    assert cpu.share_model_across_processes() is False
