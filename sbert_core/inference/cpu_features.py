"""Which matrix instructions this CPU has, read at run time (manifests record what ran).

bf16 and int8 speed depend on them: AMX (Intel Sapphire Rapids and later) multiplies bf16 and
int8 tiles; AVX512-BF16 (Cooper Lake, AMD Zen 4+) has bf16 dot products in vector registers;
AVX512-VNNI / AVX-VNNI have int8 dot products. Without VNNI, int8 matmuls emulate the dot
product in three instructions and are no faster than float32, so ``int8`` is refused there.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

# The /proc/cpuinfo flags that decide which compute path is fast.
MATRIX_FLAGS = (
    "avx2",
    "avx512f",
    "avx512_bf16",
    "avx512_vnni",
    "avx_vnni",
    "amx_bf16",
    "amx_int8",
    "amx_tile",
)


@dataclass(frozen=True)
class CpuFeatures:
    """The matrix-relevant flags of this CPU and the vector ISA torch dispatches to.

    Args:
        flags: the members of :data:`MATRIX_FLAGS` the CPU reports.
        torch_capability: ``torch.backends.cpu.get_cpu_capability()`` (``AVX512``, ``AVX2``...).
    """

    flags: frozenset[str]
    torch_capability: str

    @property
    def fast_bf16(self) -> bool:
        """Native bf16 dot products (AMX-BF16 or AVX512-BF16)."""
        return bool(self.flags & {"amx_bf16", "avx512_bf16"})

    @property
    def int8_dot(self) -> bool:
        """Native int8 dot products (AMX-INT8, AVX512-VNNI or AVX-VNNI)."""
        return bool(self.flags & {"amx_int8", "avx512_vnni", "avx_vnni"})

    @property
    def amx(self) -> bool:
        """Intel AMX tiles (bf16 or int8)."""
        return bool(self.flags & {"amx_bf16", "amx_int8"})

    def as_dict(self) -> dict:
        """What a manifest records: the flags found (sorted) and torch's ISA level."""
        return {"flags": sorted(self.flags), "torch_capability": self.torch_capability}


def parse_cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The :data:`MATRIX_FLAGS` named on the ``flags`` lines of a ``/proc/cpuinfo`` text."""
    found: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            found.update(value.split())
    return frozenset(found.intersection(MATRIX_FLAGS))


@lru_cache(maxsize=1)
def detect_cpu_features() -> CpuFeatures:
    """This machine's :class:`CpuFeatures` (no flags where ``/proc/cpuinfo`` is unreadable,
    e.g. macOS: then only the fp32 and torch-dispatched paths are assumed)."""
    import torch

    try:
        flags = parse_cpu_flags(Path("/proc/cpuinfo").read_text())
    except OSError:
        flags = frozenset()
    return CpuFeatures(flags=flags, torch_capability=torch.backends.cpu.get_cpu_capability())
