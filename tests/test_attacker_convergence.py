"""benchmarks/attacker_convergence.py: a finished run of the same curve is read back instead of
trained again (so the curves of a long env train in separate processes); a run of another
configuration, or one stopped before its end, is refused."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from attacker_convergence import finished_run, steps_to  # noqa: E402


def _write(folder: Path, **changes) -> dict:
    manifest = {"method": "paad", "eps": 0.075, "seed": 1, "steps": 2_000_896, "victim": {"agent": "zoo:hopper-ppo"},
                "strength": {"episodes": 10, "seed": 1}}
    manifest.update(changes)
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return manifest


def test_a_finished_run_of_the_same_curve_is_read_and_an_empty_folder_is_trained(tmp_path):
    assert finished_run(tmp_path / "absent", "zoo:hopper-ppo", "paad", 0.075, 1, 2_000_000, 10) is None
    (tmp_path / "empty").mkdir()
    assert finished_run(tmp_path / "empty", "zoo:hopper-ppo", "paad", 0.075, 1, 2_000_000, 10) is None
    manifest = _write(tmp_path / "done")  # SB3 rounds the steps up to whole updates: more is the same run
    assert finished_run(tmp_path / "done", "zoo:hopper-ppo", "paad", 0.075, 1, 2_000_000, 10) == manifest


@pytest.mark.parametrize("changes", [{"method": "sarl"}, {"eps": 0.05}, {"seed": 2}, {"steps": 1_000_000},
                                     {"victim": {"agent": "zoo:hopper-sa-ppo"}}, {"strength": {"episodes": 5}}])
def test_a_run_of_another_configuration_is_refused(tmp_path, changes):
    _write(tmp_path / "other", **changes)
    with pytest.raises(SystemExit, match="holds another run"):
        finished_run(tmp_path / "other", "zoo:hopper-ppo", "paad", 0.075, 1, 2_000_000, 10)


def test_a_run_stopped_before_its_end_is_refused(tmp_path):
    (tmp_path / "killed" / "checkpoint").mkdir(parents=True)
    with pytest.raises(SystemExit, match="stopped before its end"):
        finished_run(tmp_path / "killed", "zoo:hopper-ppo", "paad", 0.075, 1, 2_000_000, 10)


def test_steps_to_is_the_first_point_from_which_the_damage_stays_above_the_fraction():
    assert steps_to(0.5, [10, 20, 30, 40], [70.0, 0.0, 60.0, 100.0]) == 30  # 70 at 10 is lost at 20
    assert steps_to(0.9, [10, 20], [0.0, 0.0]) is None
