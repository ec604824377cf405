"""How the transformer computes: float32 (exact), bfloat16 / float16, or int8 on CPU.

A :class:`ComputePath` is chosen once at load (:func:`resolve_compute_path`), prepares the
loaded transformer (:func:`prepare_transformer`) and says in manifests what ran
(:meth:`ComputePath.describe`): the path, the quantizer, and on CPU the matrix features found.

``int8`` is torch's dynamic quantization of every ``nn.Linear`` of the transformer (weights int8
per output channel, activations quantized per batch at run time, int32 accumulation on the
x86/fbgemm engine, which uses VNNI dot products). It needs no calibration data, so every worker
quantizes the same float32 weights the same way; embeddings, LayerNorm, attention softmax and
pooling stay float32. It is refused where it cannot be fast or cannot run: off CPU, without
VNNI, or in a torch built without the x86/fbgemm quantized engine.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import nn

from sbert_core.cpu_features import CpuFeatures, detect_cpu_features
from sbert_core.precision import dtype_name, resolve_dtype

INT8 = "int8"
# torch's quantized engines that run int8 Linear layers with VNNI, in order of preference.
_INT8_ENGINES = ("x86", "fbgemm")
INT8_QUANTIZER = "torch.ao dynamic int8 Linear (per-channel weights)"


@dataclass(frozen=True)
class ComputePath:
    """The dtype path an encoder runs.

    Args:
        name: ``float32``, ``bfloat16``, ``float16`` or ``int8`` (``auto`` resolved).
        load_dtype: the dtype the weights are loaded in (float32 for int8, which quantizes them).
        device_type: ``cpu``, ``cuda``, ...
        quantizer: what quantized the weights (None when nothing did).
        engine: torch's quantized engine for ``int8`` (None otherwise).
    """

    name: str
    load_dtype: torch.dtype
    device_type: str
    quantizer: str | None = None
    engine: str | None = None

    def describe(self) -> dict:
        """What manifests record: ``dtype`` (the path), and ``compute`` with the quantizer,
        the engine and, on CPU, the matrix features this machine has."""
        compute: dict = {"path": self.name, "device": self.device_type}
        if self.quantizer is not None:
            compute.update(quantizer=self.quantizer, engine=self.engine)
        if self.device_type == "cpu":
            compute["cpu_features"] = detect_cpu_features().as_dict()
        return {"dtype": self.name, "compute": compute}


def int8_engine(features: CpuFeatures | None = None, engines: tuple[str, ...] | None = None) -> str:
    """The quantized engine ``int8`` uses on this CPU.

    Args:
        features: the CPU's features (default: this machine's).
        engines: torch's supported quantized engines (default: this build's).

    Raises:
        ValueError: the CPU has no int8 dot-product instructions, or torch has no x86/fbgemm
            engine; the message says which and what to use instead.
    """
    features = features or detect_cpu_features()
    engines = tuple(torch.backends.quantized.supported_engines if engines is None else engines)
    if not features.int8_dot:
        found = ", ".join(sorted(features.flags)) or "none of them"
        raise ValueError(
            "--compute-dtype int8 needs a CPU with int8 dot-product instructions (AVX512-VNNI, "
            f"AVX-VNNI or AMX-INT8); this one has {found} of the matrix flags; use bfloat16 "
            "or float32"
        )
    for engine in _INT8_ENGINES:
        if engine in engines:
            return engine
    raise ValueError(
        "--compute-dtype int8 needs torch's x86 or fbgemm quantized engine, which this torch "
        f"build lacks (it has: {', '.join(engines) or 'none'}); use bfloat16 or float32"
    )


def resolve_compute_path(name: str, device: torch.device) -> ComputePath:
    """The :class:`ComputePath` for a dtype name (``--compute-dtype``) on ``device``.

    Raises:
        ValueError: an unknown name, float16 off CUDA, or int8 off CPU / without VNNI / without
            a quantized engine (see :func:`int8_engine`).
    """
    if name != INT8:
        dtype = resolve_dtype(name, device)
        return ComputePath(dtype_name(dtype), dtype, device.type)
    if device.type != "cpu":
        raise ValueError(
            f"--compute-dtype int8 runs on CPU only; on {device.type} use float16 or bfloat16"
        )
    return ComputePath(INT8, torch.float32, "cpu", INT8_QUANTIZER, int8_engine())


def prepare_transformer(transformer: nn.Module, path: ComputePath) -> nn.Module:
    """The transformer ready to run ``path``: itself, or for int8 a copy whose Linear layers are
    dynamically quantized (inference only: quantized layers have no gradients)."""
    if path.name != INT8:
        return transformer
    torch.backends.quantized.engine = path.engine
    with warnings.catch_warnings():
        # torch 2.13 announces the removal of quantized tensor types to every caller; the
        # int8 path is refused with a clear message once the engine is gone (int8_engine).
        warnings.filterwarnings(
            "ignore", message=".*quantized tensor creation", category=UserWarning
        )
        # Per output channel weight scales: on all-MiniLM-L6-v2 STSb test 81.15 against 80.65
        # with one scale per matrix (float32: 82.03).
        return torch.ao.quantization.quantize_dynamic(
            transformer.eval(),
            {nn.Linear: torch.ao.quantization.per_channel_dynamic_qconfig},
            dtype=torch.qint8,
        )
