"""The accelerator runbook's dry run on the CPU (docs/gpu.md): the same chunk and placing
scripts a lent machine runs, for a few seconds of training each."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
CHUNK = [sys.executable, str(REPO / "tools" / "gpu" / "chunk.py")]
PLACE = [sys.executable, str(REPO / "tools" / "gpu" / "place.py")]
PARTS = ("policy.pt", "optimizer.pt", "progress.json")


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _tool(name: str):
    """A runbook script of tools/gpu/, imported as a module."""
    import importlib

    sys.path.insert(0, str(REPO / "tools" / "gpu"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(REPO / "tools" / "gpu"))


def _returned_parts(files: Path) -> dict:
    """Stand-ins for a chunk's returned parts in ``files``; their sha256 as chunk.json records them."""
    from rlgauntlet.common.hashing import sha256_file

    files.mkdir()
    for name in PARTS:
        (files / name).write_bytes(name.encode())
    return {name: sha256_file(files / name) for name in PARTS}


def test_compact_optimizer_state_halves_the_moments_and_loads_back_as_float32(tmp_path):
    from rlgauntlet.training.checkpoints import compact_optimizer_state

    layer = torch.nn.Linear(50, 40)
    optimizer = torch.optim.Adam(layer.parameters(), lr=1e-3)
    for _ in range(3):
        optimizer.zero_grad()
        (layer(torch.randn(8, 50)) ** 2).sum().backward()
        optimizer.step()
    torch.save(optimizer.state_dict(), tmp_path / "full.pt")
    compact_optimizer_state(tmp_path / "full.pt", tmp_path / "compact.pt")
    assert (tmp_path / "compact.pt").stat().st_size < 0.6 * (tmp_path / "full.pt").stat().st_size
    again = torch.optim.Adam(torch.nn.Linear(50, 40).parameters(), lr=1e-3)
    again.load_state_dict(torch.load(tmp_path / "compact.pt", weights_only=True))
    for (_, a), (_, b) in zip(sorted(optimizer.state_dict()["state"].items()), sorted(again.state_dict()["state"].items())):
        assert b["exp_avg_sq"].dtype == torch.float32 and int(b["step"]) == int(a["step"]) == 3
        torch.testing.assert_close(b["exp_avg"], a["exp_avg"], rtol=1e-2, atol=1e-8)  # bfloat16: 3 digits
        assert bool((b["exp_avg_sq"] > 0).all())  # no moment underflowed to 0 (it would in float16)


@pytest.mark.slow
def test_radial_pong_chunks_resume_from_placed_parts(tmp_path, monkeypatch):
    root, out1, out2 = tmp_path / "root", tmp_path / "out1", tmp_path / "out2"
    root.mkdir()
    # worker processes, as on the lent machine: each must register the Atari ids itself
    _run([*CHUNK, "radial-pong", "--minutes", "0.05", "--out", str(out1), "--root", str(root), "--device", "cpu",
          "--eval-episodes", "1", "--subproc-envs"], REPO)
    first = json.loads((out1 / "chunk.json").read_text())
    assert first["steps_before"] == 0 and first["steps_after"] >= 1024 and first["steps_per_second"] > 0
    # the run state beside the parts (training/run_state.py): the next chunk resumes exactly where this one stopped
    assert sorted(p.name for p in out1.iterdir()) == ["chunk.json", "optimizer.pt", "policy.pt", "progress.json",
                                                      "run_state.npz"]
    assert all(p.stat().st_size <= 16 * 2**20 for p in out1.iterdir())
    assert set(first["evaluation"]) == {"clean_mean", "clean_sem", "episodes", "bounds"}
    bounds = first["evaluation"]["bounds"]  # the preset's guarded geometric ramp from 1e-7 to 1/255 over 2/3 of 2M
    schedule = json.loads((out1 / "progress.json").read_text())["schedule"]
    # exact: the record copies the number the checkpoint wrote (JSON round trip), it computes nothing
    assert bounds["eps_train_now"] == schedule["eps"]
    one_rollout_on = 1e-7 * (1 / 255 / 1e-7) ** ((first["steps_after"] + 1024) / (2e6 * 2 / 3))
    assert 1e-7 <= schedule["eps"] <= one_rollout_on * (1 + 1e-9)  # never ahead of the plain ramp
    widths = [row["median_logit_width"] for row in bounds["at"]]
    assert [row["eps"] for row in bounds["at"]] == pytest.approx([bounds["eps_train_now"], 0.3 / 255, 1 / 255])
    assert 0 <= widths[0] < widths[1] < widths[2]  # IBP widths grow with the ball
    tampered = tmp_path / "tampered"
    shutil.copytree(out1, tampered)
    (tampered / "progress.json").write_text("{}")
    refused = subprocess.run([*PLACE, "radial-pong", str(tampered), "--root", str(root)], capture_output=True,
                             text=True)
    assert refused.returncode != 0 and "does not match the sha256" in refused.stderr
    _run([*PLACE, "radial-pong", str(out1), "--root", str(root)], REPO)
    again = subprocess.run([*PLACE, "radial-pong", str(out1), "--root", str(root)], capture_output=True, text=True)
    assert again.returncode != 0 and "already in place" in again.stderr
    folder = root / "checkpoints" / "pong-radial-ppo"
    assert not (folder / "checkpoint" / "model.zip").exists() and (folder / "checkpoint" / "policy.pt").exists()

    # the second chunk's evaluation fails: its training still comes back, and is placed
    monkeypatch.syspath_prepend(str(REPO / "tools" / "gpu"))
    import chunk

    def broken(*args, **kwargs):
        raise RuntimeError("no kornia here")

    monkeypatch.setattr(chunk, "_evaluate", broken)
    # in worker processes as the first: an exact resume needs the envs of the run it resumes
    second = chunk.run_chunk("radial-pong", 0.02, out2, root=root, device="cpu", eval_episodes=1, subproc_envs=True)
    assert second["steps_before"] == first["steps_after"] and second["steps_after"] > second["steps_before"]
    assert second["evaluation"] == {"error": "RuntimeError: no kornia here"}
    _run([*PLACE, "radial-pong", str(out2), "--root", str(root)], REPO)
    assert [c["steps_after"] for c in json.loads((folder / "chunks.json").read_text())] == \
        [first["steps_after"], second["steps_after"]]


def test_a_placed_tar_is_checked_and_extracted_as_plain_files(tmp_path):
    import tarfile

    place = _tool("place")
    files = tmp_path / "files"
    files.mkdir()
    (files / "chunk.json").write_text(json.dumps({"job": "paad-pong", "files": {}}))
    evil = tmp_path / "evil.tar"
    with tarfile.open(evil, "w") as archive:
        archive.add(files / "chunk.json", arcname="chunk.json")
        link = tarfile.TarInfo("escape")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        archive.addfile(link)
    with pytest.raises(tarfile.TarError):  # a link out of the folder is refused, nothing is placed
        place.place("paad-pong", evil, root=tmp_path / "root")
    assert not (tmp_path / "root").exists()


def test_a_collapsed_agent_is_recorded_and_not_placed(tmp_path):
    place = _tool("place")
    files, root = tmp_path / "files", tmp_path / "root"
    record = {"job": "radial-pong", "steps_before": 854040, "steps_after": 1322016, "finished": "then",
              "evaluation": {"clean_mean": -21.0}, "files": _returned_parts(files)}
    (files / "chunk.json").write_text(json.dumps(record))
    placed = place.place("radial-pong", files, root=root)
    folder = root / "checkpoints" / "pong-radial-ppo"
    assert placed["placed"] is False and "below the preset's target 15" in placed["not_placed_because"]
    assert not (folder / "checkpoint").exists()  # the last healthy checkpoint (none here) stays
    assert json.loads((folder / "chunks.json").read_text())[-1]["steps_after"] == 1322016
    record.update(evaluation={"clean_mean": 18.0}, finished="later")
    (files / "chunk.json").write_text(json.dumps(record))
    assert "placed" not in place.place("radial-pong", files, root=root)  # healthy: placed
    assert (folder / "checkpoint" / "policy.pt").read_bytes() == b"policy.pt"
    record.update(evaluation={"clean_mean": 7.4}, finished="forced")
    (files / "chunk.json").write_text(json.dumps(record))
    forced = place.place("radial-pong", files, root=root, force=True)  # placed, and the record says why not
    assert forced["forced"] is True and "below the preset's target 15" in forced["placed_despite"]
    assert json.loads((folder / "chunks.json").read_text())[-1]["forced"] is True


@pytest.mark.slow
def test_paad_pong_chunk_resumes_the_committed_checkpoint(tmp_path):
    from rlgauntlet.threats import parse_threat
    from rlgauntlet.victims import load_victim

    root, out = tmp_path / "root", tmp_path / "out"
    shutil.copytree(REPO / "checkpoints" / "paad-pong-ppo-eps0.0005", root / "checkpoints" / "paad-pong-ppo-eps0.0005")
    before = json.loads((root / "checkpoints" / "paad-pong-ppo-eps0.0005" / "manifest.json").read_text())["steps"]
    _run([*CHUNK, "paad-pong", "--minutes", "0.05", "--out", str(out), "--root", str(root), "--device", "cpu",
          "--eval-episodes", "1"], REPO)
    record = json.loads((out / "chunk.json").read_text())
    assert record["steps_before"] == before and record["steps_after"] > before
    assert record["evaluation"]["linf_max"] <= 0.0005 + 1e-6  # the attack kept its budget
    assert record["evaluation"]["episodes"] == 1 and "attacked_mean" in record["evaluation"]
    _run([*PLACE, "paad-pong", str(out), "--root", str(root)], REPO)
    folder = root / "checkpoints" / "paad-pong-ppo-eps0.0005"
    assert json.loads((folder / "manifest.json").read_text())["steps"] == record["steps_after"]
    # its run state came back and was placed: the next chunk goes on exactly where this one stopped
    assert "run_state.npz" in record["files"] and (folder / "checkpoint" / "run_state.npz").exists()
    threat = parse_threat(f"paad:attacker={folder},eps=0.0005")  # the director the manifest names: checkpoint/model.zip
    threat.check_victim(load_victim("zoo:pong-ppo"))
    assert threat.director.kind == "gaussian"


def test_a_refused_chunk_can_be_forced_later_while_it_is_the_last(tmp_path):
    place = _tool("place")
    files, root = tmp_path / "files", tmp_path / "root"
    record = {"job": "radial-pong", "steps_before": 1768488, "steps_after": 2000936, "finished": "then",
              "evaluation": {"clean_mean": 7.4}, "files": _returned_parts(files)}
    (files / "chunk.json").write_text(json.dumps(record))
    folder = root / "checkpoints" / "pong-radial-ppo"
    assert place.place("radial-pong", files, root=root)["placed"] is False
    with pytest.raises(SystemExit, match="already in place"):  # without --force it stays refused
        place.place("radial-pong", files, root=root)
    forced = place.place("radial-pong", files, root=root, force=True)
    chunks = json.loads((folder / "chunks.json").read_text())
    assert len(chunks) == 1 and chunks[0]["forced"] is True and "placed" not in chunks[0]  # replaced, not doubled
    assert forced["forced"] is True and (folder / "checkpoint" / "policy.pt").read_bytes() == b"policy.pt"
    with pytest.raises(SystemExit, match="already in place"):  # placed now: a second time is refused
        place.place("radial-pong", files, root=root, force=True)
    # a refused chunk with a later chunk recorded after it cannot be forced: it would drop that one
    record.update(finished="refused-again", steps_after=2100000)
    (files / "chunk.json").write_text(json.dumps(record))
    assert place.place("radial-pong", files, root=root)["placed"] is False
    later = dict(record, finished="later", steps_after=2200000, evaluation={"clean_mean": 18.0})
    (files / "chunk.json").write_text(json.dumps(later))
    place.place("radial-pong", files, root=root)
    (files / "chunk.json").write_text(json.dumps(record))
    with pytest.raises(SystemExit, match="a later chunk has been recorded"):
        place.place("radial-pong", files, root=root, force=True)


def test_ood_pong_jobs_keep_their_weights_out_of_git():
    JOBS = _tool("chunk").JOBS
    from rlgauntlet.training.recipes import PRESETS

    ood = {name: spec for name, spec in JOBS.items() if name.startswith("ood-pong")}
    assert sorted(ood) == sorted([*(f"ood-pong-member-{k}" for k in range(5)), "ood-pong-dropconnect",
                                  "ood-pong-dropconnect-p0.05", "ood-pong-dropconnect-p0.025", "ood-pong-mcdropout"])
    assert [PRESETS[ood[f"ood-pong-dropconnect{p}"]["preset"]].hyperparams["policy_kwargs"]["dropout"]
            for p in ("", "-p0.05", "-p0.025")] == [0.1, 0.05, 0.025]
    assert [ood[f"ood-pong-member-{k}"]["seed"] for k in range(5)] == [0, 1, 2, 3, 4]
    assert PRESETS["pong-ppo-ensemble"].members == 5
    for spec in ood.values():
        assert PRESETS[spec["preset"]].init_from == "zoo:pong-ppo"
        weights = [f"{spec['folder']}/{source}" for source in spec["returns"] if source.endswith(".pt")]
        ignored = subprocess.run(["git", "check-ignore", *weights], capture_output=True, text=True, cwd=REPO)
        assert ignored.stdout.split() == weights  # every weights file ignored: 7 × 13.5 MB stay out of the tree


def test_ood_pong_zoo_takes_the_largest_dropconnect_p_that_holds_its_target(tmp_path, monkeypatch, capsys):
    ood_pong = _tool("ood_pong")
    from rlgauntlet.errors import UserError
    from rlgauntlet.training import register

    jobs = ood_pong.AGENTS["pong-ppo-dropconnect"]
    assert jobs == ["ood-pong-dropconnect", "ood-pong-dropconnect-p0.05", "ood-pong-dropconnect-p0.025"]
    scores = {"pong-ppo-dropconnect": 4.2, "pong-ppo-dropconnect-p0.05": 17.0, "pong-ppo-dropconnect-p0.025": 19.0}
    tried = []

    def fake_register(preset, checkpoint, force=False, zoo_name=None, command=None):
        tried.append(preset)
        if scores[preset] < 15 and not force:
            raise UserError(f"{preset} scores {scores[preset]}, below its target 15")
        return {"preset": preset, "zoo_name": zoo_name, "command": command}

    monkeypatch.setattr(register, "register_zoo_agent", fake_register)
    monkeypatch.setattr(ood_pong, "_as_zoo_checkpoint", lambda job, work, root: work)

    def place(*names):
        for job in names:
            policy = tmp_path / ood_pong.JOBS[job]["folder"] / "checkpoint" / "policy.pt"
            policy.parent.mkdir(parents=True, exist_ok=True)
            policy.write_bytes(b"w")

    with pytest.raises(SystemExit, match="ood-pong-dropconnect is not placed"):
        ood_pong._register_first_that_holds("pong-ppo-dropconnect", tmp_path, False)
    place("ood-pong-dropconnect", "ood-pong-dropconnect-p0.025")
    # p 0.1 refused, p 0.05 never tried: p 0.025 holds, but is not taken before it
    with pytest.raises(SystemExit, match="ood-pong-dropconnect-p0.05 is not placed .*refused: .*4.2"):
        ood_pong._register_first_that_holds("pong-ppo-dropconnect", tmp_path, False)
    scores["pong-ppo-dropconnect-p0.025"] = 3.0
    place("ood-pong-dropconnect-p0.05")
    scores["pong-ppo-dropconnect-p0.05"] = 2.0
    with pytest.raises(SystemExit, match="no candidate holds its target .*add a smaller p"):
        ood_pong._register_first_that_holds("pong-ppo-dropconnect", tmp_path, False)
    scores.update({"pong-ppo-dropconnect-p0.05": 17.0, "pong-ppo-dropconnect-p0.025": 19.0})
    tried.clear()
    entry = ood_pong._register_first_that_holds("pong-ppo-dropconnect", tmp_path, False)
    # p 0.1 refused, p 0.05 holds: taken before p 0.025, which scores higher but drops less
    assert tried == ["pong-ppo-dropconnect", "pong-ppo-dropconnect-p0.05"]
    assert entry["preset"] == "pong-ppo-dropconnect-p0.05" and entry["zoo_name"] == "pong-ppo-dropconnect"
    assert "ood-pong-dropconnect-p0.05 --device cuda" in entry["command"]
    assert "ood-pong-dropconnect refused" in capsys.readouterr().out


@pytest.mark.slow
def test_ood_pong_chunks_fine_tune_zoo_pong_ppo_with_their_seed_and_dropout(tmp_path):
    from rlgauntlet.victims.sb3_files import read_sb3_zip
    from rlgauntlet.zoo import load_manifest, zoo_entry, zoo_file

    root = tmp_path / "root"
    root.mkdir()
    _, zoo_state = read_sb3_zip(zoo_file(zoo_entry("pong-ppo")))
    runs = {}
    for job in ("ood-pong-member-1", "ood-pong-member-2", "ood-pong-dropconnect"):
        out = tmp_path / job
        _run([*CHUNK, job, "--minutes", "0.05", "--out", str(out), "--root", str(root), "--device", "cpu",
              "--eval-episodes", "1", "--total-steps", "2048"], REPO)
        progress = json.loads((out / "progress.json").read_text())
        assert progress["init_from"]["sha256"] == load_manifest()["pong-ppo"]["sha256"]
        runs[job] = (progress, torch.load(out / "policy.pt", weights_only=True))
        _run([*PLACE, job, str(out), "--root", str(root)], REPO)
    assert [runs[j][0]["seed"] for j in ("ood-pong-member-1", "ood-pong-member-2")] == [1, 2]
    assert runs["ood-pong-dropconnect"][0]["preset"] == "pong-ppo-dropconnect"
    key = "features_extractor.linear.0.weight"
    for progress, policy in runs.values():
        moved = (policy[key] - zoo_state[key]).abs().max().item()
        assert 0 < moved < 0.05  # started from the zoo agent (a fresh init is ~0.03 away on average, max ~0.1)
    member1, member2 = runs["ood-pong-member-1"][1], runs["ood-pong-member-2"][1]
    # their seeds drew different rollouts and minibatches: apart by far more than float rounding
    assert (member1[key] - member2[key]).abs().max().item() > 1e-6
    # the DropConnect job trained the dropout policy, not a plain one: its agent carries MC DropConnect
    from rlgauntlet.training.sb3_train import checkpoint_to_zip
    from rlgauntlet.victims import load_sb3

    placed = root / "checkpoints" / "ood-pong" / "dropconnect"
    agent = load_sb3(checkpoint_to_zip("pong-ppo-dropconnect", placed, tmp_path / "dropconnect.zip"), "ppo")
    assert agent.uncertainty_method == "mc_dropconnect"
    plain = load_sb3(checkpoint_to_zip("pong-ppo-ensemble", root / "checkpoints" / "ood-pong" / "member-1",
                                       tmp_path / "member.zip"), "ppo")
    assert plain.uncertainty_method is None


@pytest.mark.slow
def test_ood_pong_zoo_and_its_evaluation_resume_across_calls(tmp_path, monkeypatch):
    import sqlite3

    from rlgauntlet.training import register

    ood_pong = _tool("ood_pong")
    root = tmp_path / "root"
    root.mkdir()
    for job in ("ood-pong-member-0", "ood-pong-member-1", "ood-pong-mcdropout"):
        out = tmp_path / job
        _run([*CHUNK, job, "--minutes", "0.05", "--out", str(out), "--root", str(root), "--device", "cpu",
              "--eval-episodes", "0", "--total-steps", "1024"], REPO)
        _run([*PLACE, job, str(out), "--root", str(root)], REPO)
    monkeypatch.setattr(register, "ZOO_EVAL_EPISODES", 2)  # the zoo's 20 clean episodes, cut for the dry run
    work = tmp_path / "work"  # a checkout's layout, as the machine receives it
    work.mkdir()
    for name in ("src", "tools"):
        (work / name).symlink_to(REPO / name)
    manifest = ood_pong.build_zoo(work / "ood-pong", root, force=True, members=2,
                                  names=["pong-ppo-ensemble", "pong-ppo-mcdropout"])
    assert sorted(manifest) == ["pong-ppo-ensemble", "pong-ppo-mcdropout"]
    assert [m["seed"] for m in manifest["pong-ppo-ensemble"]["members"]] == [0, 1]
    assert manifest["pong-ppo-mcdropout"]["uncertainty"]["method"] == "mc_dropout"
    assert not list(root.glob("checkpoints/ood-pong/*/checkpoint/model.zip"))  # nothing written beside the parts

    (work / "benchmarks").symlink_to(REPO / "benchmarks")
    local = tmp_path / "local"  # this machine's ood-pong/, where returned stores are placed

    def call(out: Path) -> int:
        out.mkdir()
        env = {**__import__("os").environ, "OUT": str(out), "WHEELS": "0", "DEVICE": "cpu", "N_ENVS": "4",
               "PYTHON": sys.executable}
        subprocess.run(["bash", str(REPO / "tools" / "gpu" / "ood_bench.sh"), "1.2", "mcdropout"], cwd=work,
                       env=env, capture_output=True, text=True, check=True)
        assert sorted(p.name for p in out.iterdir()) == ["mcdropout.tar"]  # one file per detector comes back
        placed = ood_pong.place([out / "mcdropout.tar"], local, tmp_path / "results")["mcdropout"]
        with sqlite3.connect(local / "mcdropout.sqlite") as db:
            rows = db.execute("select run_id, episode, count(*) from episodes group by run_id, episode").fetchall()
        assert all(n == 1 for *_, n in rows) and len(rows) == placed  # no episode stored twice
        return placed

    first = call(tmp_path / "out1")
    assert first >= 1  # interrupted at its budget, every finished episode kept and returned
    second = call(tmp_path / "out2")  # the machine's store (carried back on a real machine) resumed
    assert second > first
    with pytest.raises(SystemExit, match="an older call's"):  # the first call's store would lose episodes
        ood_pong.place([tmp_path / "out1" / "mcdropout.tar"], local, tmp_path / "results")


def test_ood_pong_place_merges_a_finished_detector_into_the_table(tmp_path):
    import tarfile

    ood_pong = _tool("ood_pong")
    results = tmp_path / "results"
    results.mkdir()
    (results / "ood_pong.json").write_text(json.dumps({"env": "PongNoFrameskip-v4", "detectors": {"ensemble": {"rows": [1]}}}))
    run = tmp_path / "run"
    run.mkdir()
    (run / "ood_pong.json").write_text(json.dumps({"env": "PongNoFrameskip-v4", "detectors": {"dropconnect": {"rows": [2]}}}))
    (run / "ood_pong_dropconnect.png").write_bytes(b"png")
    with tarfile.open(tmp_path / "dropconnect.tar", "w") as archive:
        for f in run.iterdir():
            archive.add(f, arcname=f.name)
    ood_pong.place([tmp_path / "dropconnect.tar"], tmp_path / "ood-pong", results)
    table = json.loads((results / "ood_pong.json").read_text())
    assert table["detectors"] == {"ensemble": {"rows": [1]}, "dropconnect": {"rows": [2]}}  # merged, none lost
    assert (results / "ood_pong_dropconnect.png").read_bytes() == b"png"
    with pytest.raises(SystemExit, match="expected ensemble.tar"):
        ood_pong.place([tmp_path / "run" / "ood_pong.json"], tmp_path / "ood-pong", results)


def test_the_pong_table_names_shifts_of_the_ood_pong_grid_and_the_papers_detectors():
    from rlgauntlet.threats.suites import ood_suite

    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from ood_tables import PAPER
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    pong = PAPER["pong"]
    grid = ood_suite(pong["suite"], pong["env"])
    assert set(pong["shifts"]) <= set(grid) and len(pong["shifts"]) == 11  # Table 5's eleven configurations
    # each configuration's severity is the paper's parameter (digest of paper 002, Table 5's rows)
    from rlgauntlet.threats import corruptions

    paper_rows = {"gaussian_noise": (corruptions.GAUSSIAN_STD, (0.18, 0.26, 0.38)),
                  "impulse_noise": (corruptions.IMPULSE_AMOUNT, (0.09, 0.17, 0.27)),
                  "motion_blur": (corruptions.MOTION_BLUR, ((15, 8), (15, 12), (20, 15))),
                  "pixelate": (corruptions.PIXELATE_FACTOR, (0.4, 0.3))}
    for name, (levels, paper_values) in paper_rows.items():
        severities = sorted(int(spec.split("=")[1]) for spec in pong["shifts"] if spec.startswith(name + ":"))
        # exact: literals of the corruption table, compared with the digest's literals
        assert [levels[k - 1] for k in severities] == list(paper_values), name
    for paper in pong["shifts"].values():
        assert set(paper) <= {"mc_dropconnect", "ensemble"}  # the paper did not run MC Dropout on Pong
        for mean, std, best in paper.values():
            assert 0.5 <= mean <= best <= 1.0 and 0 <= std < 0.05


def _slim_dry_run(*options: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REPO / "tools" / "gpu" / "slim.sh"), *options], capture_output=True, text=True,
                          env={**os.environ, "SLIM_DRY_RUN": "1"})


def test_slim_for_a_board_keeps_exactly_the_zoo_and_checkpoint_files_the_board_names():
    """``slim.sh --field field-hopper`` leaves in the tree what that board reads (its zoo agents with their
    normalisers, the manifest, its defences' model and normaliser files) and removes every other zoo and
    checkpoint file; plain ``--field`` removes them all. Listed without removing anything."""
    import re

    tracked = set(subprocess.run(["git", "ls-files", "zoo", "checkpoints"], capture_output=True, text=True,
                                 cwd=REPO, check=True).stdout.split())
    if not tracked:
        pytest.skip("not a git checkout")
    board = (REPO / "boards" / "field-hopper.yaml").read_text()
    zoo_names = set(re.findall(r"zoo:([A-Za-z0-9_.-]+)", board))
    named = {f"zoo/{name}.{suffix}" for name in zoo_names for suffix in ("zip", "vecnormalize.json")}
    named |= set(re.findall(r"(checkpoints/[^ ,\"}]+)", board)) | {"zoo/manifest.json", "zoo/__init__.py"}
    assert len(zoo_names) == 9 and len(named - tracked) == 0  # the board's 9 zoo agents, each file tracked

    every = _slim_dry_run("--field")
    for_board = _slim_dry_run("--field", "field-hopper")
    assert every.returncode == for_board.returncode == 0, every.stderr + for_board.stderr
    removed_every, removed_board = set(every.stdout.split()), set(for_board.stdout.split())
    assert tracked <= removed_every
    assert tracked - removed_board == named  # kept: the board's files, nothing more

    unknown = _slim_dry_run("--field", "no-such-board")
    assert unknown.returncode == 2 and "no board boards/no-such-board.yaml" in unknown.stderr
