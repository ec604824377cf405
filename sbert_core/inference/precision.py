"""Choosing the compute dtype: float32 by default, bf16/fp16 where they are fast and allowed.

float32 is the default because it reproduces sentence-transformers to 1e-5 and gives the same
vectors on every worker whatever its CPU. ``auto`` takes bfloat16 where the hardware multiplies
bf16 matrices natively (CUDA with bf16 support; CPUs with AMX or AVX512-BF16) and float32 elsewhere.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal, get_args

import torch

# int8 is a quantized path rather than a torch dtype: sbert_core.inference.compute_paths handles it.
DtypeName = Literal["float32", "bfloat16", "float16", "auto", "int8"]
DTYPE_NAMES: tuple[str, ...] = get_args(DtypeName)
_TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@lru_cache(maxsize=1)
def cpu_has_fast_bf16() -> bool:
    """True when this CPU has native bf16 matrix instructions (AMX-BF16 or AVX512-BF16)."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """Map a dtype name to a torch dtype for ``device``.

    Raises:
        ValueError: unknown name, or float16 on CPU (too slow and inexact there to be useful).
    """
    if name not in DTYPE_NAMES:
        raise ValueError(f"unknown dtype {name!r}; valid dtypes are: {', '.join(DTYPE_NAMES)}")
    if name == "int8":
        raise ValueError(
            "int8 is a quantized path: resolve it with sbert_core.inference.compute_paths"
        )
    if name == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.bfloat16 if cpu_has_fast_bf16() else torch.float32
    if name == "float16" and device.type != "cuda":
        raise ValueError("dtype float16 needs a CUDA device; on CPU use bfloat16 or float32")
    return _TORCH_DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    """The short name used in manifests (``float32``, ``bfloat16``, ``float16``)."""
    return str(dtype).removeprefix("torch.")
