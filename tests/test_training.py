"""`rlgauntlet train`: resumable checkpoints, and the zoo refuses agents below target."""

import json
import shutil
import subprocess
import sys

import pytest

from rlgauntlet.training.recipes import PRESETS
from rlgauntlet.zoo import zoo_dir


def _train(args, env, cwd):
    return subprocess.run([sys.executable, "-m", "rlgauntlet.cli", "train", *args], capture_output=True, text=True,
                          env=env, cwd=cwd)


def test_train_checkpoints_resume_and_register_refuses_weak_agent(tmp_path, cli_env):
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    shutil.copy(zoo_dir() / "manifest.json", zoo / "manifest.json")
    env = {**cli_env, "RLGAUNTLET_ZOO": str(zoo)}
    run = tmp_path / "run"
    first = _train(["--preset", "cartpole-ppo", "--run-dir", str(run), "--steps", "2048", "--no-register"], env, tmp_path)
    assert first.returncode == 0, first.stderr
    ckpt = run / "checkpoint"
    assert {"model.zip", "policy.pt", "optimizer.pt", "progress.json"} <= {p.name for p in ckpt.iterdir()}
    assert json.loads((ckpt / "progress.json").read_text())["num_timesteps"] >= 2048
    second = _train(["--preset", "cartpole-ppo", "--run-dir", str(run), "--steps", "4096"], env, tmp_path)
    assert "resuming at 2" in second.stderr
    assert json.loads((ckpt / "progress.json").read_text())["num_timesteps"] >= 4096
    # 4k steps are far from CartPole's 475: the zoo refuses it, with the fix in the message
    assert second.returncode == 2 and "below its target" in second.stderr and "train longer" in second.stderr
    assert json.loads((zoo / "manifest.json").read_text()) == json.loads((zoo_dir() / "manifest.json").read_text())


def test_presets_record_their_recipe():
    for name, preset in PRESETS.items():
        assert preset.env_id and preset.algo and preset.seed == 0 and preset.target_return is not None, name
        assert "policy" in preset.hyperparams


def test_every_defended_hopper_preset_has_the_robust_bar():
    """A defended agent may give up some clean return: its zoo bar is 3/4 of vanilla Hopper's
    2800 (2100), the same rule as the robust MinAtar fine-tunes; an alternating preset's bar must
    reach the recipe the zoo's gate reads (a dropped field would leave ATLA at 2800)."""
    from rlgauntlet.training.recipes import ROBUST_BAR, get_preset

    assert ROBUST_BAR == 0.75 and PRESETS["hopper-ppo"].target_return == 2800
    for name in ("hopper-sa-ppo", "hopper-atla-ppo", "hopper-pa-atla-ppo", "hopper-pa-atla-ppo-advlr",
                 "hopper-pa-atla-ppo-official"):
        assert get_preset(name).target_return == pytest.approx(2100.0), name
    assert get_preset("cartpole-atla-ppo").target_return == PRESETS["cartpole-ppo"].target_return  # none given


def test_the_recorded_command_carries_the_budget_options(tmp_path):
    """A zoo entry's command must reproduce the agent: a changed budget is part of it."""
    from rlgauntlet.training.zoo_training import plan_training

    plain = plan_training("cartpole-ppo", tmp_path / "a")
    assert plain.command == "rlgauntlet train --preset cartpole-ppo"
    short = plan_training("cartpole-ppo", tmp_path / "b", steps=5000, stop_at_target=False)
    assert short.command == "rlgauntlet train --preset cartpole-ppo --steps 5000 --no-stop-at-target"
    # a fine-tune preset never stops at its target: the flag changes nothing there and is not recorded
    assert plan_training("cartpole-sa-ppo", tmp_path / "c", stop_at_target=False).command == \
        "rlgauntlet train --preset cartpole-sa-ppo"


def test_seeds_train_side_by_side_each_in_its_own_folder_and_resume(tmp_path, cli_env):
    import pytest
    import torch

    from rlgauntlet.errors import UserError
    from rlgauntlet.training.zoo_training import seed_run_dir, train_seeds

    assert seed_run_dir("cartpole-ppo", 0, tmp_path) == tmp_path / "cartpole-ppo"  # the preset's own seed
    assert seed_run_dir("cartpole-ppo", 2, tmp_path) == tmp_path / "cartpole-ppo-seed2"  # as --seed 2 would
    results = train_seeds("cartpole-ppo", [0, 1], runs=tmp_path, workers=2, steps=512, stop_at_target=False)
    assert [r["seed"] for r in results] == [0, 1]
    folders = [tmp_path / "cartpole-ppo", tmp_path / "cartpole-ppo-seed1"]
    assert [r["run_dir"] for r in results] == [str(f) for f in folders]
    progress = [json.loads((f / "checkpoint" / "progress.json").read_text()) for f in folders]
    assert [p["seed"] for p in progress] == [0, 1] and all(p["num_timesteps"] >= 512 for p in progress)
    weights = [torch.load(f / "checkpoint" / "policy.pt", weights_only=True) for f in folders]
    # two seeds, two agents: some weight differs by far more than any float rounding could
    assert max(float((weights[0][k] - weights[1][k]).abs().max()) for k in weights[0]) > 1e-3
    assert not (zoo_dir() / "cartpole-ppo-seed1.zip").exists()  # none registered
    again = train_seeds("cartpole-ppo", [1], runs=tmp_path, steps=512, stop_at_target=False)  # resumed: done
    assert json.loads((folders[1] / "checkpoint" / "progress.json").read_text())["num_timesteps"] == \
        progress[1]["num_timesteps"] and again[0]["seed"] == 1
    with pytest.raises(UserError, match="give each seed once"):
        train_seeds("cartpole-ppo", [1, 1], runs=tmp_path)
    both = _train(["--preset", "cartpole-ppo", "--seeds", "0", "--zoo-name", "x"], cli_env, tmp_path)
    assert both.returncode == 2 and "drop --zoo-name" in both.stderr and "Traceback" not in both.stderr


def test_a_training_stopped_by_its_time_budget_goes_on_as_if_never_stopped(tmp_path):
    """`rlgauntlet train`'s exact resume, on a defence whose loss draws from torch's stream (SA-PPO's
    SGLD): stopped by its time budget at the first rollout's end and resumed, the run ends with the
    weights of the run never stopped, bit for bit (the property under test); its resume is recorded."""
    import time

    import torch

    from rlgauntlet.training.sb3_train import train_preset
    from rlgauntlet.victims.sb3_files import read_sb3_zip

    def weights(folder):
        return read_sb3_zip(folder / "model.zip")[1]

    common = dict(total_timesteps=1024, stop_at_target=False, log=lambda _: None)
    one = train_preset("cartpole-sa-ppo", tmp_path / "one", **common)
    lines = []
    train_preset("cartpole-sa-ppo", tmp_path / "two", deadline=time.monotonic(), **{**common, "log": lines.append})
    assert any("time budget reached at 256 steps; saving and stopping" in line for line in lines)
    two = train_preset("cartpole-sa-ppo", tmp_path / "two", **common)
    w1, w2 = weights(one), weights(two)
    assert all(torch.equal(w1[k], w2[k]) for k in w1)  # bit-exactness is the property under test
    assert json.loads((two / "progress.json").read_text())["resumes"] == [{"steps": 256, "exact": True}]


def test_a_training_under_a_threat_resumes_exactly_with_its_threats_streams(tmp_path):
    """Training under a sometimes-acting threat draws from two streams per episode (its schedule's
    and its own): stopped by its time budget and resumed, the run perturbs the same steps the same
    way and ends with the weights of the run never stopped (bit for bit, the property under test)."""
    import time

    import torch

    from rlgauntlet.training.sb3_train import train_preset
    from rlgauntlet.victims.sb3_files import read_sb3_zip

    def finished(folder):
        return read_sb3_zip(folder / "model.zip")[1], json.loads((folder / "progress.json").read_text())

    common = dict(total_timesteps=1024, stop_at_target=False, threat="uniform_noise:eps=0.05,p=0.5",
                  log=lambda _: None)
    (w1, p1) = finished(train_preset("cartpole-ppo", tmp_path / "one", **common))
    train_preset("cartpole-ppo", tmp_path / "two", deadline=time.monotonic(), **common)
    (w2, p2) = finished(train_preset("cartpole-ppo", tmp_path / "two", **common))
    assert all(torch.equal(w1[k], w2[k]) for k in w1)  # bit-exactness is the property under test
    assert p2["threat_applied"] == p1["threat_applied"] and 0 < p1["threat_applied"]["perturbed_steps"] < 1024
    assert p2["resumes"] == [{"steps": 256, "exact": True}]


def _optimizer_moments(path):
    """Every tensor of every optimizer state in an SB3 zip (Adam's step counts and moments), in order."""
    import io
    import zipfile

    import torch

    with zipfile.ZipFile(path) as archive:
        states = [torch.load(io.BytesIO(archive.read(name)), weights_only=True)
                  for name in sorted(archive.namelist()) if name.endswith("optimizer.pth")]
    return [t for state in states for param in state["state"].values() for t in param.values() if torch.is_tensor(t)]


@pytest.mark.parametrize("base, changes, stop_after", [
    # DQN: ε-greedy actions from the action space's generator and ε itself (decaying over the whole
    # run: near 0.6 at the stop); 64 steps a rollout, 32 gradient steps after each once past
    # learning_starts (the stop falls after it, before an update)
    ("cartpole-dqn", dict(learning_starts=200, train_freq=64, gradient_steps=32, buffer_size=2_000,
                          exploration_fraction=1.0, exploration_final_eps=0.5,
                          policy_kwargs=dict(net_arch=[32, 32])), 5),
    # TD3: random actions before learning_starts, then the policy's with Gaussian noise (NumPy's stream)
    ("pendulum-td3", dict(learning_starts=100, buffer_size=2_000, batch_size=64,
                          policy_kwargs=dict(net_arch=[32, 32])), 250),
])
def test_an_off_policy_training_stopped_by_its_time_budget_goes_on_as_if_never_stopped(tmp_path, monkeypatch, base,
                                                                                       changes, stop_after):
    """An off-policy run's exact resume: its replay buffer, the action space's generator, DQN's ε
    and the gradient steps due at the stop (made first on resume). Stopped by its time budget past
    learning_starts and resumed, it ends with the weights (target networks and optimizer moments
    included) of the run never stopped, bit for bit: the property under test."""
    import dataclasses
    import types

    import torch

    import rlgauntlet.training.kit as kit
    from rlgauntlet.training.sb3_train import train_preset
    from rlgauntlet.victims.sb3_files import read_sb3_zip

    preset = PRESETS[base]
    name = f"test-{base}-exact"
    monkeypatch.setitem(PRESETS, name, dataclasses.replace(preset, name=name, total_timesteps=512,
                                                           hyperparams={**preset.hyperparams, **changes}))
    clock = iter(range(10**6))  # the deadline's clock: one tick per rollout end, so the stop falls where it is set
    monkeypatch.setattr(kit, "time", types.SimpleNamespace(monotonic=lambda: next(clock), time=__import__("time").time))
    common = dict(stop_at_target=False, log=lambda _: None)
    one = train_preset(name, tmp_path / "one", **common)
    train_preset(name, tmp_path / "two", deadline=stop_after, **common)
    stopped = json.loads((tmp_path / "two" / "checkpoint" / "progress.json").read_text())["stopped_at_deadline"]
    assert changes["learning_starts"] < stopped < 512  # stopped mid-run, with gradient steps due
    two = train_preset(name, tmp_path / "two", **common)
    w1, w2 = read_sb3_zip(one / "model.zip")[1], read_sb3_zip(two / "model.zip")[1]
    assert all(torch.equal(w1[k], w2[k]) for k in w1)  # bit-exactness is the property under test
    m1, m2 = (_optimizer_moments(folder / "model.zip") for folder in (one, two))
    assert m1 and len(m1) == len(m2) and all(torch.equal(a, b) for a, b in zip(m1, m2))
    progress = json.loads((two / "progress.json").read_text())
    assert progress["resumes"] == [{"steps": stopped, "exact": True}] and "inexact_resume" not in progress


def test_a_signal_stops_a_training_at_its_rollouts_end_saved_and_it_goes_on_as_if_never_stopped(tmp_path,
                                                                                                  monkeypatch):
    """SIGINT mid-rollout (a real signal, through the handler the CLI installs) asks the training
    to stop: it saves at that rollout's end, exactly as a time budget does, then raises Interrupted
    (nothing since the last checkpoint is lost). Resumed, it ends with the weights of the run never
    stopped, bit for bit (the property under test)."""
    import os
    import signal

    import torch

    from rlgauntlet.common import stopping
    from rlgauntlet.training import kit
    from rlgauntlet.training.sb3_train import train_preset
    from rlgauntlet.victims.sb3_files import read_sb3_zip

    common = dict(total_timesteps=1024, stop_at_target=False, log=lambda _: None)
    one = train_preset("cartpole-sa-ppo", tmp_path / "one", **common)
    handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    on_step = kit.CheckpointCallback._on_step

    sent = []

    def signalled_past_step_300(self):  # mid-way through the second rollout (256 steps each)
        if self.model.num_timesteps >= 300 and not sent:
            sent.append(self.model.num_timesteps)
            os.kill(os.getpid(), signal.SIGINT)
        return on_step(self)

    monkeypatch.setattr(kit.CheckpointCallback, "_on_step", signalled_past_step_300)
    lines = []
    try:
        stopping.install()
        with pytest.raises(stopping.Interrupted) as stopped:
            train_preset("cartpole-sa-ppo", tmp_path / "two", **{**common, "log": lines.append})
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
    assert stopped.value.signum == signal.SIGINT and stopping.requested() is None
    assert any("SIGINT received at 512 steps; saving and stopping" in line for line in lines), lines
    monkeypatch.setattr(kit.CheckpointCallback, "_on_step", on_step)
    two = train_preset("cartpole-sa-ppo", tmp_path / "two", **common)
    w1, w2 = read_sb3_zip(one / "model.zip")[1], read_sb3_zip(two / "model.zip")[1]
    assert all(torch.equal(w1[k], w2[k]) for k in w1)  # bit-exactness is the property under test
    assert json.loads((two / "progress.json").read_text())["resumes"] == [{"steps": 512, "exact": True}]


def test_ctrl_c_saves_a_training_at_its_rollouts_end_and_exits_130(tmp_path, cli_env):
    """The process contract: SIGINT to `rlgauntlet train` says it saves at this rollout's end, does,
    and exits 130 naming what was kept; the checkpoint is where it stopped (a rollout's end, with
    its run state), not the last scheduled one."""
    import signal
    import time

    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "rlgauntlet.cli", "train", "--preset", "cartpole-ppo", "--run-dir",
                             str(run), "--steps", "200000", "--no-register"], stderr=subprocess.PIPE, text=True,
                            env={**cli_env, "PYTHONUNBUFFERED": "1"}, cwd=tmp_path)
    try:
        lines = []
        for line in proc.stderr:  # training has started once it says so
            lines.append(line)
            if "starting" in line:
                break
        time.sleep(2.0)
        proc.send_signal(signal.SIGINT)
        rest = proc.communicate(timeout=120)[1]
    finally:
        proc.kill()
    stderr = "".join(lines) + rest
    assert proc.returncode == 130, stderr
    assert "SIGINT: the training saves at the end of this rollout and stops" in stderr
    assert "interrupted by SIGINT; the last checkpoint in" in stderr and "Traceback" not in stderr
    progress = json.loads((run / "checkpoint" / "progress.json").read_text())
    steps = progress["num_timesteps"]
    assert 0 < steps < 25_000 and steps % 256 == 0 and progress["stopped_at_deadline"] == steps  # before the first
    assert (run / "checkpoint" / "run_state.npz").exists()  # scheduled checkpoint (25,000 steps): saved at the stop


def test_a_radial_training_stopped_by_its_time_budget_keeps_where_its_guarded_ramp_stands(tmp_path, monkeypatch):
    """A guarded RADIAL ramp is state (it moves after each healthy update), kept in the progress.
    Stopped by its time budget twice (at the first rollout's end, before the ramp starts, and after
    one update has moved it), the run must save the ramp at the second stop, or its resume starts the
    ramp again, and must not start it at the first, or the ramp starts a rollout early: it ends with
    the weights and the ramp of the run never stopped (bit for bit, the property under test)."""
    import dataclasses
    import time

    import torch

    from rlgauntlet.training import recipes as presets
    from rlgauntlet.training.sb3_train import train_preset
    from rlgauntlet.victims.sb3_files import read_sb3_zip

    base = presets.get_preset("cartpole-radial-ppo")
    guarded = dataclasses.replace(base, hyperparams={**base.hyperparams, "guard_max_width": 1e9})  # always healthy
    monkeypatch.setitem(presets.PRESETS, "cartpole-radial-ppo", guarded)

    def finished(folder):
        return read_sb3_zip(folder / "model.zip")[1], json.loads((folder / "progress.json").read_text())

    common = dict(total_timesteps=1024, stop_at_target=False, log=lambda _: None)
    (w1, p1) = finished(train_preset("cartpole-radial-ppo", tmp_path / "one", **common))
    first = train_preset("cartpole-radial-ppo", tmp_path / "two", deadline=time.monotonic(), **common)
    assert "ramp_position" not in json.loads((first / "progress.json").read_text()).get("schedule", {})
    second = train_preset("cartpole-radial-ppo", tmp_path / "two", deadline=time.monotonic(), **common)
    assert json.loads((second / "progress.json").read_text())["schedule"]["ramp_position"] > 0  # lost: KeyError
    (w2, p2) = finished(train_preset("cartpole-radial-ppo", tmp_path / "two", **common))
    assert all(torch.equal(w1[k], w2[k]) for k in w1)  # bit-exactness is the property under test
    # the ramp's floats compared exactly: the resumed run must be the run never stopped, on this machine
    assert p2["schedule"] == p1["schedule"] and [r["steps"] for r in p2["resumes"]] == [256, 512]


def test_recover_folders_puts_back_only_a_folder_moved_aside_whose_replacement_never_arrived(tmp_path):
    """After a kill between ``replace_folder``'s renames, ``NAME.old`` is the complete folder and
    ``NAME`` is missing: it goes back, at any depth. Where ``NAME`` exists (a kill after the second
    rename) the ``.old`` folder stays for the next write to remove, and a file is never touched."""
    from rlgauntlet.training.checkpoints import has_checkpoint, recover_folders

    (tmp_path / "checkpoint.old").mkdir()
    (tmp_path / "checkpoint.old" / "model.zip").write_text("the checkpoint in use")
    (tmp_path / "checkpoint.tmp").mkdir()
    (tmp_path / "snapshots" / "iter-0002.old").mkdir(parents=True)
    (tmp_path / "best").mkdir()
    (tmp_path / "best.old").mkdir()
    (tmp_path / "notes.old").write_text("a file")
    assert recover_folders(tmp_path) == [tmp_path / "checkpoint", tmp_path / "snapshots" / "iter-0002"]
    assert (tmp_path / "checkpoint" / "model.zip").read_text() == "the checkpoint in use"
    assert (tmp_path / "best.old").is_dir() and (tmp_path / "notes.old").is_file()
    assert recover_folders(tmp_path) == [] and recover_folders(tmp_path / "nowhere") == []
    (tmp_path / "checkpoint").rename(tmp_path / "checkpoint.old")
    assert has_checkpoint(tmp_path / "checkpoint")  # a reader of one checkpoint puts it back as well


def test_a_progress_or_manifest_write_killed_before_its_rename_leaves_the_previous_file(tmp_path, monkeypatch):
    """Resume-critical files (a checkpoint's progress, an attacker's manifest) are written to a
    temporary file and renamed into place: killed before the rename, the previous file is whole and
    no temporary file is left; written, the file holds exactly the text (a plain ``write_text``
    would already have overwritten the file when the rename failed)."""
    import os

    import rlgauntlet.common.outputs as outputs

    target = tmp_path / "manifest.json"
    target.write_text('{"steps": 128}')

    def killed(*_):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(outputs.os, "replace", killed)
        with pytest.raises(KeyboardInterrupt):
            outputs.write_text_atomic(target, '{"steps": 256}')
    assert target.read_text() == '{"steps": 128}' and os.listdir(tmp_path) == ["manifest.json"]
    outputs.write_text_atomic(target, '{"steps": 256}')
    assert target.read_text() == '{"steps": 256}' and os.listdir(tmp_path) == ["manifest.json"]
