# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The unit's work lock (_server/worklock.py): one call of the lifecycle at a time on a unit of a host, also when
the first call's controller is gone and the call itself still works on the host."""
from __future__ import annotations

import os

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils._server import worklock


def test_a_second_call_waits_for_the_first_and_names_it(tmp_path):
    fd, waited, holder = worklock.acquire(str(tmp_path), "sglang-kimi.service", wait=5)
    try:
        assert waited < 1 and holder == ""
        with open(tmp_path / "sglang-kimi.service.work") as handle:
            assert handle.read() == str(os.getpid())
        clock = iter([0.0, 0.0, 3.0, 6.0])
        with pytest.raises(worklock.WorkLockTimeout) as exc:
            worklock.acquire(str(tmp_path), "sglang-kimi.service", wait=5, clock=lambda: next(clock),
                             sleep=lambda s: None)
        assert "(pid %d) is still working on sglang-kimi.service after 5 s" % os.getpid() in str(exc.value)
        assert "nothing was changed" in str(exc.value)
    finally:
        os.close(fd)


def test_the_lock_is_free_again_when_the_first_call_ends(tmp_path):
    fd, _waited, _holder = worklock.acquire(str(tmp_path), "u.service", wait=5)
    os.close(fd)   # a call that ends, however it ends: the kernel lets go of the flock
    fd2, waited, _holder = worklock.acquire(str(tmp_path), "u.service", wait=0)
    os.close(fd2)
    assert waited < 1


def test_a_waiting_call_takes_the_lock_once_it_is_let_go(tmp_path):
    fd, _waited, _holder = worklock.acquire(str(tmp_path), "u.service", wait=5)
    ticks = []

    def sleep(_seconds):
        ticks.append(1)
        if len(ticks) == 2:
            os.close(fd)
    fd2, _waited, holder = worklock.acquire(str(tmp_path), "u.service", wait=60, sleep=sleep)
    os.close(fd2)
    assert len(ticks) == 2 and holder == str(os.getpid())
