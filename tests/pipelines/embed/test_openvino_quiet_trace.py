"""Issue 29, item 6: loading a model with ``--cpu-backend openvino`` no longer prints
transformers' ``is_gradient_checkpointing`` FutureWarning nor its ``loss_type=None ...
ForCausalLMLoss`` line (both caused by the trace reading every attribute of the model), while
other warnings still show.

Run in a fresh process: transformers logs the loss line once per process, so an earlier test
that caused it would hide it here.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("openvino")

SCRIPT = """
import sys, warnings
warnings.simplefilter("always")  # every warning, each time it is raised
from sbert_core.inference.encoder_settings import EncoderSettings
encoder = EncoderSettings(model=sys.argv[1], device="cpu", backend="openvino").load()
print(encoder.encode(["a short text", "another one"]).shape)
warnings.warn("an unrelated warning", UserWarning)
# Only the trace is quieted: reading the deprecated property ourselves still warns.
from transformers import BertConfig, BertModel
BertModel(BertConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=1,
                     intermediate_size=8, vocab_size=10)).is_gradient_checkpointing
"""


def test_openvino_load_prints_neither_transformers_line(tiny_st_dir):
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tiny_st_dir)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "(2, 32)" in done.stdout
    assert "loss_type" not in done.stderr and "ForCausalLMLoss" not in done.stderr, done.stderr
    assert done.stderr.count("is_gradient_checkpointing` is deprecated") == 1, done.stderr
    assert "an unrelated warning" in done.stderr
