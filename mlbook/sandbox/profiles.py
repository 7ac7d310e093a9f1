"""Sandbox profiles: what a lab's checks need of the sandbox its notebooks run in.

A lab names its profile in ``mlbook/labs/<lab>/__init__.py`` (``SANDBOX_PROFILE = "memory"``); a lab
that names none runs in ``"standard"``. The name travels down the pipeline as a string (the lab's
settings, the judge's plan) and only this module says what it means, so adding a profile touches
this file and the labs that choose it.

A profile decides:
- ``allocator``: the ``MALLOC_*`` settings of the sandbox's environment. glibc reads them when a
  process starts, so warm kernels inherit their fork server's: each profile has a server of its
  own (``mlbook.sandbox.forkserver``);
- ``measures_memory``: whether the judge reads the sandbox's pages from ``/proc`` around the
  calls it makes (``mlbook.sandbox.procmem``).

Why the memory profile sets the allocator, and what it costs: with glibc's defaults, freed memory
stays resident for reuse and a large allocation may never show. ``MALLOC_MMAP_THRESHOLD_`` makes
every block from 128 KiB up a fresh mapping, unmapped when freed, and fixes the threshold (glibc
otherwise raises it after a large block is freed, and later blocks up to 32 MiB would come from
heap memory that stays resident); ``MALLOC_TRIM_THRESHOLD_`` gives free memory at the top of the heap
back beyond 128 KiB (``procmem.MMAP_THRESHOLD``). Every such block is then faulted in page by page:
lab 5's training loops (activations of 256 KiB) ran about 1.5x slower with the setting
(``benchmarks/allocator_cost.py``), which is why only a lab that measures memory has it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mlbook.errors import MlbookError
from mlbook.sandbox.procmem import MMAP_THRESHOLD, TRIM_THRESHOLD

__all__ = ["SandboxProfile", "PROFILES", "STANDARD", "profile"]


@dataclass(frozen=True)
class SandboxProfile:
    name: str
    measures_memory: bool = False
    allocator: dict[str, str] = field(default_factory=dict)  # MALLOC_* variables of the environment


STANDARD = SandboxProfile("standard")
PROFILES: dict[str, SandboxProfile] = {
    "standard": STANDARD,
    "memory": SandboxProfile("memory", measures_memory=True,
                             allocator={"MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD),
                                        "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD)}),
}


def profile(name: str) -> SandboxProfile:
    """The profile called ``name``; an unknown name is an error naming the ones there are."""
    try:
        return PROFILES[name]
    except KeyError:
        raise MlbookError(f"no sandbox profile {name!r} (SANDBOX_PROFILE in the lab's mlbook/labs/<lab>/__init__.py); "
                          f"the profiles are: {', '.join(sorted(PROFILES))}") from None
