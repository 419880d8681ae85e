"""The learned attackers' progress in director steps: what a task has trained, read from its
checkpoint folders, and the bar that counts it while an executor trains (no training here: the
folders are written by hand as a director writes them)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from rlgauntlet.experiments.agents import AgentSpec
from rlgauntlet.gauntlet.plan import AttackerTask
from rlgauntlet.gauntlet.run import TrainingProgress


def _task(folder: Path, steps: int, first_stage: tuple | None = None) -> AttackerTask:
    return AttackerTask(AgentSpec(agent="zoo:hopper-ppo"), "Hopper-v5", "paad", "0.075", 0.075, 0, steps, str(folder),
                        first_stage=first_stage)


def _checkpoint(folder: Path, *steps: int) -> None:
    """A director's progress file with one history point per checkpoint."""
    (folder / "checkpoint").mkdir(parents=True, exist_ok=True)
    history = [{"steps": s, "recent_return": -1.0} for s in steps]
    (folder / "checkpoint" / "progress.json").write_text(json.dumps({"config": {}, "history": history}))


def _manifest(folder: Path, steps: int, **extra) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text(json.dumps({"steps": steps, **extra}))


def test_steps_done_reads_the_last_checkpoint(tmp_path):
    task = _task(tmp_path / "d", 1000)
    assert task.steps_done() == 0  # no folder yet
    _checkpoint(tmp_path / "d", 100, 300)
    assert task.steps_done() == 300  # the last checkpoint, not the first nor their sum
    _checkpoint(tmp_path / "d", 100, 300, 1024)
    assert task.steps_done() == 1000  # a chunk's rounding past the budget is capped at it


def test_a_file_being_written_reads_as_nothing_rather_than_failing(tmp_path):
    task = _task(tmp_path / "d", 1000)
    (tmp_path / "d" / "checkpoint").mkdir(parents=True)
    for text in ('{"history": [{"steps": 4', "[]", '{"history": []}', '{"history": [{"return": 1}]}'):
        (tmp_path / "d" / "checkpoint" / "progress.json").write_text(text)
        assert task.steps_done() == 0


def test_a_finished_task_is_all_done_even_when_it_stopped_early(tmp_path):
    task = _task(tmp_path / "d", 1000)
    _checkpoint(tmp_path / "d", 100, 300)
    _manifest(tmp_path / "d", 300, stopped_early={"at": 300})
    assert task.steps_done() == 1000  # an early stop ends the task's work


def test_a_two_stage_director_counts_its_first_stage(tmp_path):
    """A curriculum director (v8) or a longer LSTM one (v7): the first stage's steps are part of
    the task's budget, read from the first stage's folder until the second stage has a checkpoint
    (which goes on counting from the first stage's steps)."""
    first, second = tmp_path / "first-1000steps", tmp_path / "second-2000steps"
    task = _task(second, 2000, first_stage=(str(first), 1000, None, 0, "0.225"))
    assert task.steps_done() == 0
    _checkpoint(first, 200, 400)
    assert task.steps_done() == 400
    _checkpoint(first, 200, 400, 1000)
    _manifest(first, 1000)
    assert task.steps_done() == 1000  # the first stage done, the second not started
    _checkpoint(second, 200, 400, 1000, 1300)  # its checkpoint was the first stage's, then went on
    assert task.steps_done() == 1300


def test_the_bar_gains_each_step_once_and_ends_full(tmp_path):
    """Steps read while training, then the rest of each budget when it finishes (one task stops
    early); the advances sum to exactly the work left at the start, whatever the order of the
    poll and the finish (a double count or a missed remainder would break the sum)."""
    a, b = _task(tmp_path / "a", 1000), _task(tmp_path / "b", 500)
    _checkpoint(tmp_path / "a", 200)  # resumed: 200 already done before this run
    advances: list[int] = []
    lock = threading.Lock()

    def advance(n: int) -> None:
        with lock:
            advances.append(n)

    training = TrainingProgress([a, b], advance, poll_seconds=0.01)
    assert training.left == (1000 - 200) + 500  # what the stage starts from: a's 200 already done
    with training:
        _checkpoint(tmp_path / "a", 200, 600)
        _checkpoint(tmp_path / "b", 100)
        deadline = time.monotonic() + 5
        while sum(advances) < 500 and time.monotonic() < deadline:  # 400 of a's, 100 of b's
            time.sleep(0.01)
        assert sum(advances) == 500
        _manifest(tmp_path / "b", 100, stopped_early={"at": 100})
        training.finished(b)
        assert sum(advances) == 900  # b's whole budget
        time.sleep(0.05)  # polls after b finished add nothing more for it
        assert sum(advances) == 900
        _manifest(tmp_path / "a", 1000)
        training.finished(a)
    assert sum(advances) == (1000 - 200) + 500 and all(n > 0 for n in advances) and training.left == 0


def test_a_finish_before_any_checkpoint_counts_the_whole_budget(tmp_path):
    """Ray on another machine: the folders are not visible here, the bar moves as tasks finish."""
    task = _task(tmp_path / "elsewhere", 700)
    advances: list[int] = []
    with TrainingProgress([task], advances.append, poll_seconds=3600) as training:
        training.finished(task, {"steps": 700})
    assert advances == [700]
