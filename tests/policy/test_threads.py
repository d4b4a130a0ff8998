"""The default torch CPU thread count: half the cores, at least 1, at most 4."""

import pytest

from polyrl.policy.threads import default_threads


@pytest.mark.parametrize("cores, threads", [(1, 1), (2, 1), (3, 1), (4, 2), (6, 3), (8, 4), (64, 4)])
def test_default_threads_is_half_the_cores_between_1_and_4(cores, threads):
    assert default_threads(cores) == threads


def test_keep_freed_memory_serves_large_tensors_from_the_heap():
    """glibc serves a 64 MiB block with its own mmap by default (returned to the kernel on free, page-faulted in
    again on the next allocation). After keep_freed_memory it comes from the heap, below the program break,
    where freed memory stays for the next tensor."""
    import ctypes
    import sys

    import torch

    from polyrl.policy.threads import keep_freed_memory

    if not sys.platform.startswith("linux"):
        assert keep_freed_memory() is False
        return
    assert keep_freed_memory() is True
    libc = ctypes.CDLL("libc.so.6")
    libc.sbrk.restype = ctypes.c_void_p
    block = torch.empty(2**24)
    assert block.data_ptr() < libc.sbrk(0), "allocated on the heap, not by mmap"


def test_the_training_config_keeps_freed_memory_by_default(tiny_train_config, monkeypatch):
    import polyrl.policy.threads as threads

    calls = []
    monkeypatch.setattr(threads, "keep_freed_memory", lambda: calls.append(1) or True)
    threads.configure_torch(1, True, "cpu", tiny_train_config().keep_freed_memory)
    threads.configure_torch(1, True, "cpu", tiny_train_config(keep_freed_memory=False).keep_freed_memory)
    assert calls == [1]
