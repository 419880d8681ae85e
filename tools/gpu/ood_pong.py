"""OOD Pong (paper 002) on a lent machine, after its training jobs (see docs/gpu.md).

    python tools/gpu/ood_pong.py zoo [--dir ood-pong]       (here, after placing the seven jobs)

turns the placed checkpoints under ``checkpoints/ood-pong/`` into a zoo folder of their own
(``ood-pong/``, ignored by git): the ensemble of the five members as ``pong-ppo-ensemble`` and the
two dropout agents as ``pong-ppo-mcdropout`` and ``pong-ppo-dropconnect`` (the first of its placed
candidates, p 0.1, 0.05, 0.025, that holds the target), each with its sha256,
command, seed and clean return over the zoo's 20 episodes, exactly as the shipped zoo records its
agents (the same registration code; ``RLGAUNTLET_ZOO`` points it at this folder). The lent
machine then evaluates them from that folder (carrying it):

    bash tools/gpu/ood_bench.sh MINUTES ensemble mcdropout dropconnect
    python tools/gpu/ood_pong.py place ensemble.tar mcdropout.tar dropconnect.tar      (here)

``place`` puts each returned store back into ``ood-pong/`` (the next call resumes it; a store
with fewer episodes than the one here is refused) and, once a detector's run has finished,
merges its rows into ``benchmarks/results/ood_pong.json`` beside the paper's Table 5.

An agent below its preset's target (15) is refused, as the zoo refuses it (``--force`` for the
CPU dry run, whose agents have trained for seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from chunk import JOBS  # noqa: E402

#: the zoo names the evaluation takes, and the jobs whose checkpoints make each
AGENTS = {
    "pong-ppo-ensemble": [f"ood-pong-member-{k}" for k in range(5)],
    "pong-ppo-mcdropout": ["ood-pong-mcdropout"],
    # candidates, largest p first: the first placed one that holds the target is registered (the
    # paper's rule, p tuned until the agent still solves its task)
    "pong-ppo-dropconnect": ["ood-pong-dropconnect", "ood-pong-dropconnect-p0.05", "ood-pong-dropconnect-p0.025"],
}


def _command(job: str) -> str:
    """What trained a job's agent, for its zoo entry: the chunk command, its chunks on record."""
    return (f"python tools/gpu/chunk.py {job} --device cuda --subproc-envs (chunks: "
            f"{JOBS[job]['folder']}/chunks.json)")


def _placed(folder: Path) -> bool:
    return (folder / "checkpoint" / "policy.pt").exists()


def _as_zoo_checkpoint(job: str, work: Path, root: Path = REPO) -> Path:
    """A job's placed checkpoint as the model.zip and progress.json the zoo's registration takes."""
    from rlgauntlet.training.sb3_train import checkpoint_to_zip

    folder = root / JOBS[job]["folder"]
    checkpoint = work / job
    checkpoint.mkdir()
    checkpoint_to_zip(JOBS[job]["preset"], folder, checkpoint / "model.zip")
    shutil.copyfile(folder / "checkpoint" / "progress.json", checkpoint / "progress.json")
    return checkpoint


def _register_first_that_holds(name: str, root: Path, force: bool) -> dict:
    """Register, as ``name``, the first of its candidate jobs (largest p first) whose placed agent
    holds its preset's target over the zoo's episodes, each refusal printed. A candidate is taken
    only after every one before it was placed and refused; otherwise, or when none holds: exit."""
    from rlgauntlet.errors import UserError
    from rlgauntlet.training.register import register_zoo_agent

    refusals = []
    for job in AGENTS[name]:
        if not _placed(root / JOBS[job]["folder"]):
            raise SystemExit(f"{name}: {job} is not placed" + (f" (refused: {'; '.join(refusals)})" if refusals else "")
                             + "; run and place it first (a candidate is taken only once those before it failed)")
        with tempfile.TemporaryDirectory() as work:
            checkpoint = _as_zoo_checkpoint(job, Path(work), root)
            try:
                return register_zoo_agent(JOBS[job]["preset"], checkpoint, force=force, zoo_name=name,
                                          command=_command(job))
            except UserError as exc:
                refusals.append(f"{job}: {exc}")
                print(f"{name}: {job} refused ({exc})")
    raise SystemExit(f"{name}: no candidate holds its target ({'; '.join(refusals)}); add a smaller p")


def build_zoo(target: Path, root: Path = REPO, force: bool = False, members: int | None = None,
              names: list[str] | None = None) -> dict:
    """Write the OOD Pong agents placed under ``root`` into the zoo folder ``target``; returns its
    manifest. ``members`` keeps the first N ensemble members (the dry run's shortcut)."""
    from rlgauntlet.training.register import register_zoo_ensemble
    from rlgauntlet.zoo import load_manifest

    target.mkdir(parents=True, exist_ok=True)
    previous = os.environ.get("RLGAUNTLET_ZOO")
    os.environ["RLGAUNTLET_ZOO"] = str(target.resolve())
    try:
        for name in names or list(AGENTS):
            if name in load_manifest(target):
                print(f"{name}: already in {target}")
                continue
            if name.endswith("ensemble"):
                jobs = AGENTS[name][:members]
                folders = [root / JOBS[job]["folder"] for job in jobs]
                missing = [str(f) for f in folders if not _placed(f)]
                if missing:
                    raise SystemExit(f"{name}: no placed checkpoint in {', '.join(missing)}; run and place its jobs first")
                with tempfile.TemporaryDirectory() as work:
                    checkpoints = [_as_zoo_checkpoint(job, Path(work), root) for job in jobs]
                    commands = "; ".join(_command(job) for job in jobs)
                    entry = register_zoo_ensemble(JOBS[jobs[0]]["preset"], checkpoints, force=force, zoo_name=name,
                                                  command=commands)
            else:
                entry = _register_first_that_holds(name, root, force)
            print(f"{name}: clean {entry['clean_return']['mean']:.1f} over {entry['clean_return']['episodes']} "
                  f"episodes, into {target}")
        return load_manifest(target)
    finally:
        if previous is None:
            os.environ.pop("RLGAUNTLET_ZOO", None)
        else:
            os.environ["RLGAUNTLET_ZOO"] = previous


def _episodes(store: Path) -> int:
    import sqlite3

    if not store.exists():
        return 0
    with sqlite3.connect(store) as db:
        return int(db.execute("select count(*) from episodes").fetchone()[0])


def place(files: list[Path], target: Path = REPO / "ood-pong", results: Path = REPO / "benchmarks" / "results") -> dict:
    """Put returned ``DETECTOR.tar`` files back: each store into ``target``, each finished
    detector's rows into ``results/ood_pong.json`` (and its plot beside it). Returns episodes
    stored per detector."""
    import gzip
    import tarfile

    detectors = ("ensemble", "mcdropout", "dropconnect")
    placed = {}
    for tar in files:
        detector = tar.name.removesuffix(".tar")
        if detector not in detectors:
            raise SystemExit(f"{tar}: expected ensemble.tar, mcdropout.tar or dropconnect.tar (what ood_bench.sh returns)")
        with tempfile.TemporaryDirectory() as folder, tarfile.open(tar) as archive:
            archive.extractall(folder, filter="data")  # plain files under the folder only
            folder = Path(folder)
            returned = folder / "store.sqlite"
            if (folder / "store.sqlite.gz").exists():
                returned.write_bytes(gzip.decompress((folder / "store.sqlite.gz").read_bytes()))
                store = target / f"{detector}.sqlite"
                coming, here = _episodes(returned), _episodes(store)
                if coming < here:
                    raise SystemExit(f"{tar}: its store holds {coming} episodes, the one in {target} {here}: an "
                                     "older call's; place the latest one")
                target.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(returned, store.with_suffix(".sqlite.tmp"))
                store.with_suffix(".sqlite.tmp").replace(store)
                placed[detector] = coming
            result = folder / "ood_pong.json"
            if result.exists():  # the run finished: its rows join the table
                table_path = results / "ood_pong.json"
                table = json.loads(table_path.read_text()) if table_path.exists() else {"env": "PongNoFrameskip-v4",
                                                                                          "detectors": {}}
                table["detectors"].update(json.loads(result.read_text())["detectors"])
                results.mkdir(parents=True, exist_ok=True)
                table_path.write_text(json.dumps(table, indent=2) + "\n")
                for plot in folder.glob("*.png"):
                    shutil.copyfile(plot, results / plot.name)
            print(f"{detector}: {placed.get(detector, 0)} episodes stored"
                  + ("; finished, rows in " + str(results / "ood_pong.json") if result.exists() else ""))
    return placed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["zoo", "place"])
    parser.add_argument("files", nargs="*", type=Path, help="place: the returned DETECTOR.tar files")
    parser.add_argument("--dir", type=Path, default=REPO / "ood-pong", help="the zoo folder to write")
    parser.add_argument("--root", type=Path, default=REPO, help="the checkout whose checkpoints/ood-pong is read")
    parser.add_argument("--force", action="store_true", help="register agents below their target (dry runs)")
    parser.add_argument("--members", type=int, default=None, help="keep the first N ensemble members (dry runs)")
    parser.add_argument("--only", nargs="+", choices=list(AGENTS), help="only these agents")
    args = parser.parse_args()
    if args.command == "place":
        place(args.files, args.dir)
        return
    manifest = build_zoo(args.dir, args.root, args.force, args.members, args.only)
    print(json.dumps({name: entry.get("sha256") for name, entry in manifest.items()}))


if __name__ == "__main__":
    main()
