"""The steady-state rate of `python -m torchburn.bench eager --training` (bench/eager.py), with the
program runs replaced by a model of their loop times: a fast program is rerun with more steps, and a
loop-time difference that is not positive is an error rather than a rate (it once printed 2e11 steps/s)."""
from __future__ import annotations

import pathlib

import pytest

from torchburn.bench import eager


def _fake_runs(monkeypatch, seconds_per_step, first_steps_cost):
    calls = []

    def loop_seconds(path, backend, threads, steps):
        calls.append(steps)
        return first_steps_cost(steps) + seconds_per_step * steps

    monkeypatch.setattr(eager, "_program_loop_seconds", loop_seconds)
    return calls


def test_a_fast_program_runs_longer_and_gives_its_steady_rate(monkeypatch):
    calls = _fake_runs(monkeypatch, 2e-5, lambda steps: 0.01)  # 210 steps: 4 ms beyond the first 10
    rate = eager._program_steps_per_s(pathlib.Path("fast.py"), "turbo", 1, 210)
    assert max(calls) > 210 * 10  # rerun with more steps until the difference reaches 0.3 s
    assert max(calls) <= 210 * 100
    assert rate == pytest.approx(1 / 2e-5)


def test_a_slow_program_runs_once(monkeypatch):
    calls = _fake_runs(monkeypatch, 5e-3, lambda steps: 0.2)
    rate = eager._program_steps_per_s(pathlib.Path("slow.py"), "torch", 2, 210)
    assert calls == [210, 10]
    assert rate == pytest.approx(200.0)


def test_a_non_positive_difference_is_an_error_not_a_rate(monkeypatch):
    # one-time costs that grow with the run hide every step: the difference never turns positive
    _fake_runs(monkeypatch, 0.0, lambda steps: 0.5 if steps == 10 else 0.4)
    with pytest.raises(RuntimeError, match=r"no longer than 10 steps .*too noisy"):
        eager._program_steps_per_s(pathlib.Path("noisy.py"), "torch", 1, 210)
