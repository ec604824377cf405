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

On CPU the transformer can also run on OpenVINO (``backend="openvino"``, the ``--cpu-backend``
option; :mod:`sbert_core.inference.openvino_path`): float32, bfloat16 (refused without AVX512-BF16
or AMX, where the plugin would quietly fall back to float32) and int8 (NNCF static int8 calibrated
on fixed texts; refused without VNNI).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import nn

from sbert_core.inference.cpu_features import CpuFeatures, detect_cpu_features
from sbert_core.inference.precision import dtype_name, resolve_dtype

TORCH = "torch"
OPENVINO = "openvino"
BACKENDS = (TORCH, OPENVINO)
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
        backend: what runs the transformer: ``torch`` or ``openvino`` (CPU).
        backend_version: the OpenVINO version (None on torch).
    """

    name: str
    load_dtype: torch.dtype
    device_type: str
    quantizer: str | None = None
    engine: str | None = None
    backend: str = TORCH
    backend_version: str | None = None

    def describe(self) -> dict:
        """What manifests record: ``dtype`` (the path), and ``compute`` with the quantizer,
        the engine, the backend and, on CPU, the matrix features this machine has."""
        compute: dict = {"path": self.name, "device": self.device_type, "backend": self.backend}
        if self.backend_version is not None:
            compute["backend_version"] = self.backend_version
        if self.quantizer is not None:
            compute["quantizer"] = self.quantizer
        if self.engine is not None:
            compute["engine"] = self.engine
        if self.device_type == "cpu":
            compute["cpu_features"] = detect_cpu_features().as_dict()
        return {"dtype": self.name, "compute": compute}


def require_int8_dot(features: CpuFeatures) -> None:
    """Refuse int8 (on either backend) where the CPU has no int8 dot-product instructions.

    Raises:
        ValueError: no AVX512-VNNI, AVX-VNNI or AMX-INT8; the message names what the CPU has.
    """
    if not features.int8_dot:
        found = ", ".join(sorted(features.flags)) or "none of them"
        raise ValueError(
            "--compute-dtype int8 needs a CPU with int8 dot-product instructions (AVX512-VNNI, "
            f"AVX-VNNI or AMX-INT8); this one has {found} of the matrix flags; use bfloat16 "
            "or float32"
        )


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
    require_int8_dot(features)
    for engine in _INT8_ENGINES:
        if engine in engines:
            return engine
    raise ValueError(
        "--compute-dtype int8 needs torch's x86 or fbgemm quantized engine, which this torch "
        f"build lacks (it has: {', '.join(engines) or 'none'}); use bfloat16 or float32"
    )


def resolve_compute_path(
    name: str | ComputePath, device: torch.device, backend: str = TORCH
) -> ComputePath:
    """The :class:`ComputePath` for a dtype name (``--compute-dtype``) on ``device``.

    Args:
        name: a dtype name, or a path already resolved (returned as it is when it was resolved
            for ``device``'s type).
        device: where the encoder runs.
        backend: ``torch``, or ``openvino`` (CPU; see :func:`openvino_compute_path`).

    Raises:
        ValueError: an unknown name or backend, float16 off CUDA, int8 off CPU / without VNNI /
            without a quantized engine (see :func:`int8_engine`), or an OpenVINO path this
            machine cannot run.
    """
    if isinstance(name, ComputePath):
        if name.device_type != device.type:
            raise ValueError(
                f"the compute path was resolved for {name.device_type}, not {device.type}"
            )
        return name
    if backend not in BACKENDS:
        raise ValueError(f"unknown --cpu-backend {backend!r}; valid: {', '.join(BACKENDS)}")
    if backend != TORCH:
        return openvino_compute_path(name, device)
    if name != INT8:
        dtype = resolve_dtype(name, device)
        return ComputePath(dtype_name(dtype), dtype, device.type)
    if device.type != "cpu":
        raise ValueError(
            f"--compute-dtype int8 runs on CPU only; on {device.type} use float16 or bfloat16"
        )
    return ComputePath(INT8, torch.float32, "cpu", INT8_QUANTIZER, int8_engine())


def openvino_compute_path(
    name: str, device: torch.device, features: CpuFeatures | None = None
) -> ComputePath:
    """The OpenVINO :class:`ComputePath` for a dtype name on ``device``.

    Raises:
        ValueError: off CPU, OpenVINO not installed, float16 or ``auto``'s fp16, bfloat16
            without native bf16 (AVX512-BF16 / AMX), or int8 without VNNI / AMX-INT8.
    """
    from sbert_core.inference.openvino_path import OPENVINO_INT8_QUANTIZER, openvino_version

    if device.type != "cpu":
        raise ValueError(f"--cpu-backend openvino runs on CPU only; on {device.type} use torch")
    features = features or detect_cpu_features()
    if name == "auto":
        name = "bfloat16" if features.fast_bf16 else "float32"
    if name not in ("float32", "bfloat16", INT8):
        dtype_name(resolve_dtype(name, device))  # an unknown name or float16 on CPU fails here
        raise ValueError(f"--cpu-backend openvino runs float32, bfloat16 or int8, not {name}")
    if name == "bfloat16" and not features.fast_bf16:
        raise ValueError(
            "--compute-dtype bfloat16 --cpu-backend openvino needs native bf16 (AVX512-BF16 or "
            "AMX-BF16), which this CPU lacks; use float32 or int8"
        )
    if name == INT8:
        require_int8_dot(features)
    version = openvino_version()
    quantizer = OPENVINO_INT8_QUANTIZER if name == INT8 else None
    return ComputePath(
        name, torch.float32, "cpu", quantizer, backend=OPENVINO, backend_version=version
    )


def prepare_transformer(transformer: nn.Module, path: ComputePath, info=None) -> nn.Module:
    """The transformer ready to run ``path``: itself, for int8 a copy whose Linear layers are
    dynamically quantized (inference only: quantized layers have no gradients), or on the
    OpenVINO backend an :class:`~sbert_core.inference.openvino_path.OpenVINOTransformer` (inference
    only; its int8 is calibrated on texts tokenised as ``info``, the model's
    :class:`~sbert_core.model.info.ModelInfo`, says)."""
    if path.backend != TORCH:
        from sbert_core.inference.openvino_path import (
            OpenVINOTransformer,
            calibration_batches,
            convert_transformer,
            probe_batch,
        )

        if path.name == INT8 and info is None:
            raise ValueError("the OpenVINO int8 path needs the model's tokenizer to calibrate")
        calibration = calibration_batches(info) if path.name == INT8 else None
        threads = torch.get_num_threads()
        # The conversion is checked on a batch padded as the model's tokenizer pads.
        probe = probe_batch(transformer, info.tokenizer if info is not None else None)
        compiled = convert_transformer(transformer.eval(), path.name, threads, calibration, probe)
        return OpenVINOTransformer(transformer, compiled)
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
