"""The memory budget and temporary-disk checks every stage runs before reading its inputs."""

from __future__ import annotations

import ctypes

import pytest
from sbert_pipeline.io import resources
from sbert_pipeline.io.resources import (
    MemoryBudget,
    ResourceError,
    release_free_memory,
    require_disk,
    require_memory,
    resident_bytes,
    resolve_budget,
)
from sbert_pipeline.stage_api.options import OptionError
from sbert_pipeline.stage_api.shared_options import checked_memory_budget


def test_auto_is_a_share_of_the_available_memory(monkeypatch):
    monkeypatch.setattr(resources, "available_memory", lambda: 10 * 2**30)
    budget = resolve_budget("auto")
    assert budget.bytes == int(10 * 2**30 * resources.AUTO_SHARE)
    assert "auto" in budget.source and "10.00 GiB" in budget.source
    assert resolve_budget(None).bytes == budget.bytes


def test_a_size_is_read_and_more_than_the_machine_is_refused(monkeypatch):
    monkeypatch.setattr(resources, "total_memory", lambda: 8 * 2**30)
    assert resolve_budget("4GB") == MemoryBudget(4 * 10**9, "--memory-budget 4GB")
    with pytest.raises(ValueError, match=r"more than this machine's 8\.00 GiB"):
        resolve_budget("40TB")
    with pytest.raises(OptionError, match="--memory-budget"):
        checked_memory_budget("four gigabytes")


def test_require_memory_names_the_need_the_budget_and_the_way_out():
    budget = MemoryBudget(2**30, "--memory-budget 1GiB")
    require_memory(2**30, budget, "the vectors", "use fewer")
    with pytest.raises(ResourceError) as refused:
        require_memory(3 * 2**30, budget, "1,000 vectors", "use --shards 4")
    message = str(refused.value)
    assert "1,000 vectors needs 3.00 GiB" in message
    assert "budget of 1.00 GiB (--memory-budget 1GiB)" in message
    assert "at least 3.00 GiB" in message and "use --shards 4" in message


def test_require_disk_checks_the_nearest_existing_folder(tmp_path, monkeypatch):
    missing = tmp_path / "not" / "yet"
    assert resources.free_disk(str(missing)) == resources.free_disk(str(tmp_path)) > 0
    require_disk(1, str(missing), "the blocks", "use fewer")
    with pytest.raises(ResourceError, match=r"temporary disk under .*only .* is free"):
        require_disk(resources.free_disk(str(tmp_path)) * 4, str(missing), "the blocks", "x")


def test_peak_rss_grows_with_an_allocation():
    before = resources.peak_rss()
    block = bytearray(64 * 2**20)
    block[::4096] = b"x" * len(block[::4096])
    assert resources.peak_rss() >= before
    assert resources.peak_rss() >= 64 * 2**20


def test_release_free_memory_hands_freed_heap_blocks_back():
    # Blocks below glibc's mmap threshold live on the heap; freed under a block still in use
    # (the fence), they stay resident until malloc_trim.
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    block, count = 64 * 1024, 2_000
    # Free heap pages earlier tests left resident would be reused without growing the
    # resident size (CI saw 50 of the 131 MB); trim them first so the blocks fault in fresh.
    release_free_memory()
    before = resident_bytes()
    blocks = [libc.malloc(block) for _ in range(count)]
    fence = libc.malloc(block)
    for address in blocks:
        ctypes.memset(address, 1, block)
    grown = resident_bytes() - before
    for address in blocks:
        libc.free(address)
    held = resident_bytes()
    release_free_memory()
    released = held - resident_bytes()
    libc.free(fence)
    assert grown > 0.5 * block * count
    assert released > 0.5 * grown, (grown, released)


READ_AND_MEASURE = """
import sys
from sbert_pipeline.io.resources import return_freed_arrow_memory_at_once, resident_bytes
if sys.argv[2] == "on":
    assert return_freed_arrow_memory_at_once()
import pyarrow.parquet as pq
before = resident_bytes()
for batch in pq.ParquetFile(sys.argv[1]).iter_batches(batch_size=16384):
    matrix = batch.column(0).values.to_numpy()
del batch, matrix
print(resident_bytes() - before)
"""


def test_arrow_memory_read_and_freed_goes_back_at_once(tmp_path):
    # A fresh interpreter each: mimalloc reads its settings when pyarrow is imported.
    import os
    import subprocess
    import sys

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows, dim = 100_000, 384
    vectors = np.random.default_rng(0).standard_normal((rows, dim), dtype=np.float32)
    column = pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), dim)
    path = tmp_path / "vectors.parquet"
    pq.write_table(pa.table({"embedding": column}), path, row_group_size=5_000)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIMALLOC_")}

    def held_after_reading(mode: str) -> int:
        done = subprocess.run(
            [sys.executable, "-c", READ_AND_MEASURE, str(path), mode],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        return int(done.stdout.split()[-1])

    kept, returned = held_after_reading("off"), held_after_reading("on")
    # Without the setting the freed pages stay resident (measured here 2.4x the vectors); with
    # it only the allocator's own working set does (about 65 MB).
    assert kept > vectors.nbytes, kept
    assert returned < kept / 3, (kept, returned)


def test_a_user_purge_setting_is_kept(monkeypatch):
    monkeypatch.delitem(__import__("sys").modules, "pyarrow", raising=False)
    monkeypatch.setenv("MIMALLOC_PURGE_DELAY", "250")
    assert resources.return_freed_arrow_memory_at_once()
    assert resources.os.environ["MIMALLOC_PURGE_DELAY"] == "250"
    monkeypatch.delenv("MIMALLOC_PURGE_DELAY")
    assert resources.return_freed_arrow_memory_at_once()
    assert resources.os.environ["MIMALLOC_PURGE_DELAY"] == "0"
