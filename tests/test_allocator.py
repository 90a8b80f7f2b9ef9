"""keep_freed_memory: the pages of a large block that was freed serve the next large block, without faulting fresh
ones, under glibc and under a preloaded jemalloc; malloc_in_use names the allocator."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys

import pytest

PROGRAM = """
import resource, sys, torch
from graphtree.backend.allocator import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
block = torch.ones(16 * 2**20)  # 64 MiB: above glibc's largest mmap threshold
del block
before = faults()
# A little less than was freed: the small allocations between the two may take the freed block's first bytes,
# and the same size would then no longer fit in what is left of it (a pass's blocks vary in size anyway).
block = torch.ones(15 * 2**20)
print(faults() - before)
"""


JEMALLOC = ctypes.util.find_library("jemalloc")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc or a preloaded jemalloc")
@pytest.mark.parametrize("preload", ["", "jemalloc"])
def test_a_freed_block_is_reused_only_when_kept(preload):
    if preload and JEMALLOC is None:
        pytest.skip("needs libjemalloc")
    env = {**os.environ, "LD_PRELOAD": JEMALLOC if preload else ""}

    def faults(mode: str) -> int:
        done = subprocess.run([sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        return int(done.stdout.split()[-1])

    pages = 60 * 2**20 // 4096  # the second block's
    system, kept = faults("system"), faults("keep")
    assert system > pages // 2, system  # the control: malloc as it starts hands the block back, and faults again
    assert kept < pages // 100, kept


@pytest.mark.skipif(not sys.platform.startswith("linux") or JEMALLOC is None, reason="needs libjemalloc")
def test_malloc_in_use_names_a_preloaded_jemalloc_and_glibc_otherwise():
    program = "from graphtree.backend.allocator import malloc_in_use; print(malloc_in_use())"

    def reported(**env: str) -> str:
        done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                              env={**os.environ, **env})
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.split()[-1]

    assert reported(LD_PRELOAD=JEMALLOC) == "jemalloc"
    assert reported(LD_PRELOAD="") == "glibc"
