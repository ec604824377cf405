"""The transformer run by OpenVINO's CPU plugin instead of torch (``--cpu-backend openvino``).

The loaded float32 torch transformer is converted in memory (``openvino.convert_model``, no
files written) with dynamic batch and length, then compiled for the CPU at the precision the
compute path names: ``f32``; ``bf16`` (matrix products in bf16 with float32 accumulation;
LayerNorm, softmax and the residual stream stay float32, so it is closer to float32 than
torch's bf16, whose residual stream is bf16); or ``int8``: NNCF's static post-training
quantization for transformers (int8 weights per output channel, int8 activations with ranges
calibrated once, SmoothQuant and bias correction), calibrated on the 300 fixed texts of
:mod:`sbert_core.inference.calibration_texts`, so every worker builds the same model from the same
weights. (NNCF's weight-only int8 with the plugin's dynamic activation quantization needs no
calibration but ran at half the bf16 speed here: the weights are decompressed, not multiplied
in int8.) Conversion takes seconds; int8 calibration tens of seconds, once per worker.

Pooling and the modules after it stay in torch: :class:`OpenVINOTransformer` is a drop-in for
the Hugging Face model in :class:`~sbert_core.inference.encoder.SentenceEncoder` (it returns
``last_hidden_state``), inference only. It keeps the torch model it was converted from (its
config, device and dtype are what the encoder reads) and splits each batch into slices of at
most :data:`OPENVINO_TOKEN_BUDGET` padded tokens: the plugin was fastest there on 2 cores,
where torch was fastest at 2,048 (the vectors do not depend on the split, rows are independent).
"""

from __future__ import annotations

import contextlib
import io
import logging
import threading
import warnings
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

# Padded tokens per OpenVINO inference: on all-MiniLM-L6-v2, 2 cores (AVX512-BF16), 1,024 ran
# 1.16-1.27x faster than 2,048 and 1.1x faster than 512 in bf16.
OPENVINO_TOKEN_BUDGET = 1024
# What each compute path asks the plugin for (INFERENCE_PRECISION_HINT); int8 layers run int8
# whatever the hint, which then only decides the layers left in floating point.
PRECISION_HINTS = {"float32": "f32", "bfloat16": "bf16", "int8": "f32"}
OPENVINO_INT8_QUANTIZER = (
    "NNCF static int8 (transformer preset), calibrated on sbert_core.inference.calibration_texts"
)
# transformers' FutureWarning when anything reads PreTrainedModel.is_gradient_checkpointing.
_GRADIENT_CHECKPOINTING_WARNING = r"`is_gradient_checkpointing` is deprecated"
# Texts per calibration batch (300 texts: 19 batches of similar length).
_CALIBRATION_BATCH = 16


def openvino_version() -> str:
    """The installed OpenVINO's version.

    Raises:
        ValueError: OpenVINO is not installed (the message says how to install it).
    """
    try:
        import openvino
    except ImportError:
        raise ValueError(
            "--cpu-backend openvino needs the openvino package (and nncf for int8): "
            "pip install 'sbert-pipeline[openvino]', or use --cpu-backend torch"
        ) from None
    return openvino.get_version()


@dataclass
class HiddenStates:
    """What the encoder reads of a Hugging Face model's output."""

    last_hidden_state: torch.Tensor  # (B, T, h) float32


@dataclass
class ClassifierLogits:
    """What the cross-encoder reads of a sequence-classification model's output."""

    logits: torch.Tensor  # (B, num_labels) float32


# The output each converted model gives, by its name in the Hugging Face output, and the class
# OpenVINOTransformer hands it back in.
_OUTPUT_TYPES = {"last_hidden_state": HiddenStates, "logits": ClassifierLogits}
# How a refusal names each output.
_OUTPUT_WORDS = {"last_hidden_state": "hidden states"}


class _LastHiddenState(nn.Module):
    """The Hugging Face model as a function of its input tensors (``token_type_ids`` only where
    given) to one of its outputs, which is what is converted."""

    def __init__(self, transformer: nn.Module, output: str = "last_hidden_state") -> None:
        super().__init__()
        self.transformer = transformer
        self.output = output

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        output = self.transformer(input_ids=input_ids, attention_mask=attention_mask, **extra)
        return getattr(output, self.output)


def calibration_batches(info) -> list[dict[str, np.ndarray]]:
    """:data:`~sbert_core.inference.calibration_texts.CALIBRATION_TEXTS` as :func:`padded_inputs` of
    :data:`_CALIBRATION_BATCH` texts: the inputs the int8 path calibrates on."""
    from sbert_core.inference.calibration_texts import CALIBRATION_TEXTS

    return padded_inputs(info, CALIBRATION_TEXTS, batch_size=_CALIBRATION_BATCH)


def padded_inputs(
    info, texts: list[str], *, batch_size: int | None = None, token_budget: int | None = None
) -> list[dict[str, np.ndarray]]:
    """``texts`` tokenised as the model tokenises (``info``: its
    :class:`~sbert_core.model.info.ModelInfo`) in length-sorted batches of at most
    ``batch_size`` texts and/or ``token_budget`` padded tokens, padded as its tokenizer pads:
    the model's inputs (``input_ids``, ``attention_mask``) as numpy arrays."""
    from sbert_core.inference.batching import length_sorted_batches
    from sbert_core.inference.tokenizing import pad_token_ids, tokenize_texts

    tokenizer = info.tokenizer
    tokens = tokenize_texts(
        tokenizer, texts, max_seq_length=info.max_seq_length, lower=info.do_lower_case
    )
    left = getattr(tokenizer, "padding_side", "right") == "left"
    batches = []
    for indices in length_sorted_batches(
        tokens.n_tokens, batch_size=batch_size, token_budget=token_budget
    ):
        features = pad_token_ids(
            [tokens.input_ids[i] for i in indices],
            int(tokenizer.pad_token_id),
            left=left,
            device=torch.device("cpu"),
        )
        batches.append({name: tensor.numpy() for name, tensor in features.items()})
    return batches


def convert_transformer(
    transformer: nn.Module,
    path_name: str,
    threads: int,
    calibration: list[dict[str, np.ndarray]] | None = None,
    probe: dict[str, np.ndarray] | None = None,
    *,
    output: str = "last_hidden_state",
):
    """The OpenVINO CPU model of ``transformer`` (float32 torch) for ``path_name``, compiled:
    :func:`compile_for_cpu` of :func:`openvino_model`.

    Args:
        transformer: the Hugging Face encoder (or sequence classifier), float32, in eval mode.
        path_name: ``float32``, ``bfloat16`` or ``int8`` (see :data:`PRECISION_HINTS`).
        threads: inference threads of the plugin (torch's intra-op thread count).
        calibration: int8 only: the batches activation ranges are calibrated on
            (:func:`calibration_batches`).
        probe: what the conversion is checked on (:func:`probe_batch`); its keys are the
            inputs converted.
        output: the Hugging Face output the model gives (``last_hidden_state``, ``logits``).

    Raises:
        ValueError: as :func:`openvino_model`.
    """
    model = openvino_model(transformer, path_name, calibration, probe, output=output)
    return compile_for_cpu(model, path_name, threads)


def openvino_model(
    transformer: nn.Module,
    path_name: str,
    calibration: list[dict[str, np.ndarray]] | None = None,
    probe: dict[str, np.ndarray] | None = None,
    *,
    output: str = "last_hidden_state",
):
    """``transformer`` (float32 torch, eval mode) as an ``openvino.Model`` of dynamic batch
    and length giving its ``output`` (the hidden states of an encoder, the ``logits`` of a
    sequence classifier), for int8 quantized on ``calibration`` (not compiled yet).

    It is traced with eager attention (the model's own implementation is restored after): a
    padded row's pad positions attend to nothing in a decoder's causal mask (and in some
    encoders' local masks), which the converted SDPA turns into NaN that then reaches every
    position; eager attention's additive mask keeps them finite, as torch's SDPA does. The
    float32 conversion is then checked against torch on ``probe`` (default
    :func:`probe_batch`: two rows of different lengths, padded on the right). The inputs
    converted are the probe's (``input_ids``, ``attention_mask`` and, for a cross-encoder,
    ``token_type_ids``).

    Raises:
        ValueError: the model cannot be converted (the message names the model class), its
            conversion gives other hidden states than torch on the probe, or int8 without
            calibration batches.
    """
    import openvino as ov

    probe = probe if probe is not None else probe_batch(transformer)
    example = torch.ones(1, 8, dtype=torch.long)  # (B, T)
    shape = ov.PartialShape([-1, -1])  # any batch size and length
    try:
        with torch.no_grad(), _quiet_trace(), eager_attention(transformer):
            model = ov.convert_model(
                _LastHiddenState(transformer, output).eval(),
                example_input=tuple(example for _ in probe),
                input=[(name, shape, ov.Type.i64) for name in probe],
            )
    except Exception as err:  # OpenVINO raises its own error types for unsupported graphs
        raise ValueError(
            f"--cpu-backend openvino cannot convert {type(transformer).__name__} ({err}); "
            "use --cpu-backend torch"
        ) from None
    check_conversion(model, transformer, probe, output=output)
    if path_name == "int8":
        if not calibration:
            raise ValueError("the OpenVINO int8 path needs calibration batches")
        model = _quantize_int8(model, calibration)
    return model


@contextlib.contextmanager
def _quiet_trace():
    """Silence exactly what tracing a Hugging Face model makes transformers and torch say, none
    of it true of the run: the trace warns that Python booleans of shapes become constants (the
    ones in Hugging Face's masking hold for every shape: mask length == sequence length), and it
    reads every attribute of the model, deprecated properties too, so transformers warns that
    ``is_gradient_checkpointing`` is deprecated and, reading ``loss_function`` of an encoder
    that has no loss, that ``loss_type=None`` falls back to ``ForCausalLMLoss``. Nothing
    computes a loss here. (transformers logs that line once per process, so it stays unsaid
    after the trace too.)"""
    loss_logger = logging.getLogger("transformers.modeling_utils")
    loss_filter = _LossTypeFilter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.filterwarnings(
            "ignore",
            message=_GRADIENT_CHECKPOINTING_WARNING,
            category=FutureWarning,
            module=r"transformers\.modeling_utils",
        )
        loss_logger.addFilter(loss_filter)
        try:
            yield
        finally:
            loss_logger.removeFilter(loss_filter)


class _LossTypeFilter(logging.Filter):
    """Drops transformers' ``loss_type=None ... ForCausalLMLoss`` line (see _quiet_trace)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (message.startswith("`loss_type=") and "ForCausalLMLoss" in message)


@contextlib.contextmanager
def eager_attention(transformer: nn.Module):
    """``transformer`` runs Hugging Face's eager attention inside the block (as it is, if it
    cannot switch: :func:`check_conversion` then judges its own), its own implementation
    again after."""
    config = getattr(transformer, "config", None)
    before = getattr(config, "_attn_implementation", None)
    switch = getattr(transformer, "set_attn_implementation", None)
    if switch is None or before in (None, "eager"):
        yield transformer
        return
    try:
        switch("eager")
    except (ValueError, NotImplementedError):  # an architecture without eager attention
        yield transformer
        return
    try:
        yield transformer
    finally:
        switch(before)


def probe_batch(
    transformer: nn.Module, tokenizer=None, *, token_types: bool = False
) -> dict[str, np.ndarray]:
    """Two rows of fixed pseudo-random token ids, 11 and 5 tokens long, the short one padded
    as ``tokenizer`` pads (its pad id and side; without one id 0 on the right): the inputs
    :func:`check_conversion` compares on. A length other than the trace's (8) and a padded
    row are what a wrong conversion gets wrong. ``token_types`` adds ``token_type_ids`` as a
    pair has them (the last real tokens of each row of type 1, padding 0)."""
    pad_id = getattr(tokenizer, "pad_token_id", None) or 0
    left = getattr(tokenizer, "padding_side", "right") == "left"
    vocab = int(getattr(getattr(transformer, "config", None), "vocab_size", 0) or 100)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (2, 11), generator=generator)
    mask = torch.ones_like(ids)
    pad = slice(0, 6) if left else slice(5, 11)
    ids[1, pad], mask[1, pad] = pad_id, 0
    probe = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
    if token_types:
        # The second text of a pair: the later half of each row's real tokens.
        position = mask.cumsum(1)  # (B, T): 1..n over real tokens
        second = position > mask.sum(1, keepdim=True) // 2
        probe["token_type_ids"] = (second & mask.bool()).long().numpy()
    return probe


def check_conversion(
    model,
    transformer: nn.Module,
    probe: dict[str, np.ndarray],
    *,
    output: str = "last_hidden_state",
) -> None:
    """Raise ValueError unless ``model`` (converted, float32) gives ``transformer``'s ``output``
    on ``probe`` (hidden states at its unpadded positions, logits of every row), finite and
    within 1e-3 of the largest."""
    compiled = compile_for_cpu(model, "float32", torch.get_num_threads())
    got = np.asarray(compiled.create_infer_request().infer(probe)[0])
    with torch.no_grad():
        expected = (
            _LastHiddenState(transformer, output)(
                **{name: torch.from_numpy(values) for name, values in probe.items()}
            )
            .float()
            .numpy()
        )
    # Per-token outputs (B, T, h) are compared at real tokens, per-row ones (B, labels) whole.
    real = probe["attention_mask"].astype(bool) if expected.ndim == 3 else slice(None)
    scale = max(1.0, float(np.abs(expected[real]).max()))
    difference = float(np.abs(got[real] - expected[real]).max())  # NaN if any is NaN
    if not difference <= 1e-3 * scale:
        raise ValueError(
            f"--cpu-backend openvino: the converted {type(transformer).__name__} gives other "
            f"{_OUTPUT_WORDS.get(output, output)} than torch on a padded probe batch (largest "
            f"difference {difference:.3g} at values up to {scale:.3g}); use --cpu-backend torch"
        )


def compile_for_cpu(model, path_name: str, threads: int, plugin_config: dict | None = None):
    """``model`` (of :func:`openvino_model`) compiled by the CPU plugin for ``path_name``
    with ``threads`` inference threads; ``plugin_config`` adds plugin properties
    (``{"PERF_COUNT": True}`` for per-layer times, as ``benchmarks/openvino_bound.py`` reads)."""
    import openvino as ov

    config = {
        "INFERENCE_PRECISION_HINT": PRECISION_HINTS[path_name],
        "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_NUM_THREADS": threads,
        **(plugin_config or {}),
    }
    return ov.Core().compile_model(model, "CPU", config)


def _quantize_int8(model, calibration: list[dict[str, np.ndarray]]):
    """``model`` statically quantized to int8 by NNCF, without NNCF's tables and progress bars
    on stdout (which may be a command's output)."""
    import nncf

    level = logging.getLogger("nncf").level
    nncf.set_log_level(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return nncf.quantize(
                model,
                nncf.Dataset(calibration),
                model_type=nncf.ModelType.TRANSFORMER,
                subset_size=len(calibration),
            )
    finally:
        nncf.set_log_level(level)


class OpenVINOTransformer(nn.Module):
    """A compiled OpenVINO model in place of a Hugging Face encoder or sequence classifier
    (inference only).

    Args:
        source: the float32 torch transformer it was converted from (kept for its config and
            so that the encoder's device and dtype read as before; it is not run).
        compiled: the ``openvino.CompiledModel`` of :func:`convert_transformer`.
        token_budget: at most this many padded tokens per inference.
        output: what ``compiled`` gives, as it was converted: ``last_hidden_state`` (returned
            as :class:`HiddenStates`) or ``logits`` (as :class:`ClassifierLogits`).
    """

    def __init__(
        self,
        source: nn.Module,
        compiled,
        token_budget: int = OPENVINO_TOKEN_BUDGET,
        *,
        output: str = "last_hidden_state",
    ):
        super().__init__()
        if output not in _OUTPUT_TYPES:
            raise ValueError(
                f"unknown OpenVINO model output {output!r}; valid: {list(_OUTPUT_TYPES)}"
            )
        self.source = source.requires_grad_(False)
        self.config = getattr(source, "config", None)
        self._compiled = compiled
        self._token_budget = token_budget
        self._output = _OUTPUT_TYPES[output]
        self._inputs = tuple(port.get_any_name() for port in compiled.inputs)
        # An infer request holds buffers and runs one inference at a time: one per thread, for
        # runners that share the model between threads.
        self._requests = threading.local()
        self.train(False)

    def _request(self):
        request = getattr(self._requests, "request", None)
        if request is None:
            request = self._requests.request = self._compiled.create_infer_request()
        return request

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        **_: object,
    ) -> HiddenStates | ClassifierLogits:
        """The last hidden states ``(B, T, h)`` (or the logits ``(B, labels)``) float32 of padded
        ids and mask ``(B, T)``; ``token_type_ids`` go in where the model was converted with
        them (zeros when not given, as Hugging Face models default them)."""
        if torch.is_grad_enabled() and self.training:
            raise RuntimeError(
                "the OpenVINO backend runs inference only; train with --cpu-backend torch"
            )
        features = {
            "input_ids": input_ids.cpu().numpy(),
            "attention_mask": attention_mask.cpu().numpy(),
        }
        if "token_type_ids" in self._inputs:
            features["token_type_ids"] = (
                np.zeros_like(features["input_ids"])
                if token_type_ids is None
                else token_type_ids.cpu().numpy()
            )
        ids = features["input_ids"]
        rows = max(1, self._token_budget // max(1, ids.shape[1]))
        request = self._request()
        parts = []
        for start in range(0, ids.shape[0], rows):
            inputs = {name: values[start : start + rows] for name, values in features.items()}
            parts.append(np.array(request.infer(inputs)[0]))  # a copy: the request reuses it
        return self._output(torch.from_numpy(np.concatenate(parts)))
