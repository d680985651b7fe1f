"""Fixtures of the row machine's tests (test_row_machine.py, test_row_native.py,
test_row_machine_indices.py): programs whose cold kernels stay on the first tier, with the
row machine loaded, and a record of their row programs' runs."""
import numpy as np
import pytest

from aotgrad.codegen import row_native, row_program, row_vm, tiers


@pytest.fixture
def machine_tier(empty_cache, monkeypatch):
    """Programs built here keep their cold kernels on the first tier (no compile of
    theirs), where the row machine runs what it can; every run through the machine is
    counted in the list returned."""
    monkeypatch.setenv("AOTGRAD_BACKGROUND_COMPILE", "1")
    monkeypatch.setenv("AOTGRAD_ROW_MACHINE", "1")
    monkeypatch.delenv("AOTGRAD_FIRST_TIER", raising=False)
    monkeypatch.setattr(tiers, "submit", lambda job, priority=None: None)
    monkeypatch.setattr(tiers, "track", lambda units, priority=None: None)
    assert row_vm.wait(900), f"the row machine did not load: {row_vm._machine.failed!r}"
    runs = []
    run = row_program.RowProgram.run
    monkeypatch.setattr(row_program.RowProgram, "run",
                        lambda self, *a, **k: runs.append(run(self, *a, **k))
                        or runs[-1])
    return runs


@pytest.fixture
def captured(empty_cache, monkeypatch):
    """Programs built here keep their cold kernels on the first tier (no compile of theirs
    but the native one, which each test asks for itself); every row program run is
    recorded with its arguments: (program, copies of the arguments, whole values)."""
    monkeypatch.setenv("AOTGRAD_BACKGROUND_COMPILE", "1")
    monkeypatch.setenv("AOTGRAD_ROW_MACHINE", "1")
    monkeypatch.delenv("AOTGRAD_FIRST_TIER", raising=False)
    monkeypatch.setattr(tiers, "submit", lambda job, priority=None: None)
    monkeypatch.setattr(tiers, "track", lambda units, priority=None: None)
    monkeypatch.setattr(row_native, "request", lambda program, seconds=0.0: None)
    assert row_vm.wait(900), f"the row machine did not load: {row_vm._machine.failed!r}"
    runs = []
    run = row_program.RowProgram.run

    def recording(self, args, whole, native=None, machine=None):
        runs.append((self, [np.array(a) for a in args], dict(whole)))
        return run(self, args, whole, native, machine)
    monkeypatch.setattr(row_program.RowProgram, "run", recording)
    return runs
