"""One chunk of a long training run on a lent accelerator machine (see docs/gpu.md).

A chunk resumes the job's checkpoint under ``ROOT/checkpoints/JOB-FOLDER`` (committed in the
repository, so it travels with the working tree), trains until its time budget is spent, saves
the checkpoint (policy and optimizer, no replay buffer), evaluates the result and copies what
the next chunk and the zoo need into ``--out`` (at most 8 files, each under 16 MiB):

    python tools/gpu/chunk.py radial-pong --minutes 8 --out $OUT --device cuda --subproc-envs

Jobs (:data:`JOBS`): ``radial-pong`` (RADIAL-PPO fine-tune of zoo:pong-ppo, preset
``pong-radial-ppo``), ``paad-pong`` (the PA-AD director against zoo:pong-ppo at ε = 0.0005,
resumed from the committed checkpoint towards the paper's budget) and the OOD Pong agents
(``ood-pong-member-0`` … ``-4``, ``ood-pong-mcdropout``, ``ood-pong-dropconnect`` and its smaller-p
``-p0.05``, ``-p0.025``). ``tools/gpu/place.py`` puts
the returned files back into ``checkpoints/``. The same script runs on the CPU for the dry run
(``--device cpu``, a budget of seconds), which is the slow test ``tests/test_gpu_runbook.py``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))

#: what each job trains, where its checkpoint lives, and which files come back
JOBS = {
    "radial-pong": {
        "kind": "preset", "preset": "pong-radial-ppo", "folder": "checkpoints/pong-radial-ppo",
        "env": "PongNoFrameskip-v4",
        # the zip of a Pong PPO with its Adam state is 20 MiB: policy and optimizer come back apart;
        # run_state.npz (0.3 MB at a rollout's end): the next chunk goes on exactly where this one stopped
        "returns": {"checkpoint/policy.pt": "policy.pt", "checkpoint/optimizer.pt": "optimizer.pt",
                    "checkpoint/progress.json": "progress.json", "checkpoint/run_state.npz": "run_state.npz"},
    },
    # the paper's linear ε ramp, run beside the geometric one to compare (its parts stay local, git ignores them)
    "radial-pong-linear": {
        "kind": "preset", "preset": "pong-radial-ppo-linear", "folder": "checkpoints/pong-radial-ppo-linear",
        "env": "PongNoFrameskip-v4",
        "returns": {"checkpoint/policy.pt": "policy.pt", "checkpoint/optimizer.pt": "optimizer.pt",
                    "checkpoint/progress.json": "progress.json", "checkpoint/run_state.npz": "run_state.npz"},
    },
    "paad-pong": {
        "kind": "attacker", "agent": "zoo:pong-ppo", "env": "PongNoFrameskip-v4", "method": "paad", "eps": 0.0005,
        "steps": 2_500_000, "folder": "checkpoints/paad-pong-ppo-eps0.0005",
        # the threat loads the director file whose sha256 the manifest records: this checkpoint/model.zip
        # run_state.npz (0.8 MB here): the next chunk goes on exactly where this one stopped
        "returns": {"checkpoint/model.zip": "model.zip", "checkpoint/progress.json": "progress.json",
                    "manifest.json": "manifest.json", "checkpoint/run_state.npz": "run_state.npz"},
    },
}
#: returned files a chunk may lack (a run whose state could not be written): placing removes the old one
OPTIONAL_RETURNS = {"run_state.npz"}
# OOD Pong (paper 002): the five ensemble members and the two dropout agents, fine-tunes of
# zoo:pong-ppo that each finish in one chunk; their weights stay out of git (checkpoints/ood-pong/,
# policy and optimizer ignored), their records (chunks.json) are committed
_PARTS = {"checkpoint/policy.pt": "policy.pt", "checkpoint/optimizer.pt": "optimizer.pt",
          "checkpoint/progress.json": "progress.json"}
for _k in range(5):
    JOBS[f"ood-pong-member-{_k}"] = {"kind": "preset", "preset": "pong-ppo-ensemble", "seed": _k,
                                     "folder": f"checkpoints/ood-pong/member-{_k}", "env": "PongNoFrameskip-v4",
                                     "returns": dict(_PARTS)}
for _kind in ("mcdropout", "dropconnect", "dropconnect-p0.05", "dropconnect-p0.025"):
    JOBS[f"ood-pong-{_kind}"] = {"kind": "preset", "preset": f"pong-ppo-{_kind}", "folder": f"checkpoints/ood-pong/{_kind}",
                                 "env": "PongNoFrameskip-v4", "returns": dict(_PARTS)}
#: what comes back from the machine, per file (its limit is 16 MiB)
MAX_FILE_BYTES = 16 * 2**20


def _device_record(device: str) -> dict:
    import torch

    record = {"device": device, "torch": torch.__version__}
    if device.startswith("cuda") and torch.cuda.is_available():
        record["gpu"] = torch.cuda.get_device_name(0)
    import os

    record["cpus"] = os.cpu_count()
    return record


def _progress(folder: Path) -> dict:
    progress = folder / "checkpoint" / "progress.json"
    return json.loads(progress.read_text()) if progress.exists() else {}


def _steps(folder: Path) -> int:
    data = _progress(folder)
    return int(data.get("num_timesteps") or (data.get("history") or [{"steps": 0}])[-1]["steps"])


def bound_record(model_zip: Path, preset: str, env_id: str, steps: int, device: str, observations: int = 256,
                 eps_grid: tuple[float, ...] = (0.3 / 255, 1 / 255), eps_now: float | None = None) -> dict:
    """How tight the RADIAL agent's IBP bounds are after a chunk: ε_train where the schedule
    stands (``eps_now``, as the checkpoint's progress records it; else where the unguarded ramp
    stands after ``steps``), and at it and at each grid budget (pixel01 units) the median logit
    width (mean over actions), the median certified margin and the fraction of states certified,
    over the first ``observations`` states of a clean episode (seed 0). The numbers to watch
    before committing to a whole run (docs/gpu.md)."""
    import numpy as np

    from rlgauntlet.bounds.certification import certified_margin, score_bounds
    from rlgauntlet.envs.presets import make_env
    from rlgauntlet.experiments.agents import load_for_env
    from rlgauntlet.training.recipes import PRESETS
    from rlgauntlet.training.defences.radial import median_logit_width, radial_eps_at

    if eps_now is None:
        recipe = PRESETS[preset]
        ramp_fraction = recipe.hyperparams.get("ramp_fraction", 2 / 3)
        ramp = min(1.0, steps / (ramp_fraction * recipe.total_timesteps))
        eps_now = radial_eps_at(ramp, recipe.hyperparams["radial_eps"], recipe.hyperparams.get("eps_start", 0.0))
    victim, _ = load_for_env(f"sb3:{model_zip}", env_id, device=device)
    env = make_env(env_id)
    obs, _ = env.reset(seed=0)
    states = []
    for _ in range(observations):
        states.append(obs)
        obs, _, terminated, truncated, _ = env.step(int(victim.act(obs[None])[0]))
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()
    x = victim.preprocess(np.stack(states))
    record = {"eps_train_now": eps_now, "states": len(states), "at": []}
    for eps in (eps_now, *eps_grid):
        nominal, lower, upper = score_bounds(victim, x, eps)
        margin = certified_margin(nominal, lower, upper)
        record["at"].append({"eps": eps, "median_logit_width": median_logit_width(lower, upper),
                             "median_certified_margin": float(margin.median()),
                             "certified_fraction": float((margin > 0).float().mean())})
    return record


def _evaluate(spec: dict, folder: Path, device: str, episodes: int, log) -> dict:
    """The chunk's evaluation: the agent's clean return (and, for RADIAL, its bound widths), or
    the victim's return under the attacker (without SSIM: kornia does not travel)."""
    if spec["kind"] == "preset":
        from rlgauntlet.experiments.agents import AgentSpec
        from rlgauntlet.experiments.evaluate import evaluate
        from rlgauntlet.training.recipes import PRESETS

        model_zip = folder / "checkpoint" / "model.zip"
        evaluation: dict = {}
        if episodes > 0:
            report = evaluate(AgentSpec(agent=f"sb3:{model_zip}", device=device), spec["env"], episodes=episodes,
                              n_envs=min(8, episodes), impact=False)
            clean = report.evaluations[0]
            evaluation = {"clean_mean": clean["return_mean"], "clean_sem": clean["return_sem"], "episodes": episodes}
        if "radial_eps" in PRESETS[spec["preset"]].hyperparams:
            evaluation["bounds"] = bound_record(model_zip, spec["preset"], spec["env"], _steps(folder), device,
                                                eps_now=_progress(folder).get("schedule", {}).get("eps"))
        return evaluation
    from rlgauntlet.experiments.attacker_job import attacker_strength

    manifest = attacker_strength(spec["agent"], spec["env"], folder, spec["eps"], episodes=max(episodes, 1),
                                 device=device, perceptual_every=0, log=log)
    return manifest["strength"]


def run_chunk(job: str, minutes: float, out: Path, root: Path = REPO, device: str = "cuda",
              subproc_envs: bool = False, eval_episodes: int = 5, total_steps: int | None = None) -> dict:
    """Train ``job`` for ``minutes`` from its checkpoint under ``root`` and write the chunk's
    files and record (``chunk.json``) to ``out``. Returns the record."""
    from rlgauntlet.common.hashing import sha256_file
    from rlgauntlet.training.checkpoints import compact_optimizer_state

    spec = JOBS[job]
    folder = root / spec["folder"]
    before = _steps(folder)
    started = time.monotonic()
    log = lambda text: print(text, flush=True)  # noqa: E731
    if spec["kind"] == "preset":
        from rlgauntlet.training.sb3_train import train_preset

        train_preset(spec["preset"], folder, device=device, total_timesteps=total_steps, threads=1,
                     stop_at_target=False, log=log, deadline=started + 60.0 * minutes, subproc_envs=subproc_envs,
                     seed=spec.get("seed"))
    else:
        from rlgauntlet.experiments.attacker_job import train_attacker

        train_attacker(spec["agent"], spec["env"], spec["method"], spec["eps"], total_steps or spec["steps"], folder,
                       device=device, log=log, eval_episodes=0, deadline=started + 60.0 * minutes,
                       subproc_envs=subproc_envs)
    seconds = time.monotonic() - started
    after = _steps(folder)
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for source, name in spec["returns"].items():
        path = folder / source
        if name in OPTIONAL_RETURNS and not path.exists():
            continue
        if path.stat().st_size > MAX_FILE_BYTES:
            raise SystemExit(f"{path} is {path.stat().st_size / 2**20:.1f} MiB, over the 16 MiB a file may bring back")
        if name == "optimizer.pt":  # Adam's moments in bfloat16: the checkpoint must fit the working tree
            compact_optimizer_state(path, out / name)
        else:
            shutil.copyfile(path, out / name)
        files[name] = sha256_file(out / name)
    record = {"job": job, "steps_before": before, "steps_after": after, "train_seconds": round(seconds, 1),
              "steps_per_second": round((after - before) / seconds, 1) if seconds > 0 else None,
              "evaluation": None, "files": files, **_device_record(device),
              "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    # the checkpoint and its record are out before the evaluation starts: an evaluation that fails
    # (or outlasts the command) loses no training
    (out / "chunk.json").write_text(json.dumps(record, indent=2) + "\n")
    evaluated = time.monotonic()
    try:
        record["evaluation"] = _evaluate(spec, folder, device, eval_episodes, log)
    except Exception as exc:  # noqa: BLE001 (recorded; the evaluation can be redone from the returned files)
        record["evaluation"] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        log(f"evaluation failed: {record['evaluation']['error']}")
    record["eval_seconds"] = round(time.monotonic() - evaluated, 1)
    if spec["kind"] == "attacker":  # the manifest now holds the strength: bring that one back
        shutil.copyfile(folder / "manifest.json", out / "manifest.json")
        files["manifest.json"] = sha256_file(out / "manifest.json")
    (out / "chunk.json").write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record), flush=True)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("job", choices=sorted(JOBS))
    parser.add_argument("--minutes", type=float, default=8.0, help="time budget of the training (the chunk "
                        "also loads, evaluates and copies: keep it under the machine's 10-minute limit)")
    parser.add_argument("--out", type=Path, required=True, help="where the returned files go ($OUT)")
    parser.add_argument("--root", type=Path, default=REPO, help="the checkout whose checkpoints/ is resumed")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--subproc-envs", action="store_true", help="step the envs in worker processes")
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument("--total-steps", type=int, default=None, help="override the job's budget (dry runs)")
    args = parser.parse_args()
    if not 0 < args.minutes <= 9:
        raise SystemExit("--minutes: give a budget in (0, 9]; a command may run 10 minutes at most")
    run_chunk(args.job, args.minutes, args.out, args.root, args.device, args.subproc_envs, args.eval_episodes,
              args.total_steps)


if __name__ == "__main__":
    main()
