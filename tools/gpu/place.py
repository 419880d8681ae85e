"""Put a chunk's returned files where the next chunk and the zoo expect them (see docs/gpu.md).

    python tools/gpu/place.py radial-pong FILES      (a folder, or the chunk's JOB.tar)

checks every file against the sha256 its ``chunk.json`` recorded on the machine, copies the
checkpoint into ``checkpoints/<job folder>/checkpoint/`` (an attacker's manifest and its
``attacker.zip`` into the job folder), and appends the chunk's record to the folder's
``chunks.json`` (steps, wall time, steps per second, device, evaluation), the run's log.

A trained agent whose evaluation on the machine fell below its preset's target return (a RADIAL
run that collapsed) is recorded in ``chunks.json`` with ``placed: false`` and its weights are
left out: the next chunk resumes from the last healthy checkpoint (``--force`` places it anyway,
then or later: a refused chunk that is still the last one recorded can be forced afterwards).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from chunk import JOBS, OPTIONAL_RETURNS  # noqa: E402


def _unhealthy(spec: dict, record: dict) -> str | None:
    """Why a trained agent's chunk must not replace its checkpoint (None: it may)."""
    clean = (record.get("evaluation") or {}).get("clean_mean")
    if spec["kind"] != "preset" or clean is None:
        return None
    from rlgauntlet.training.recipes import PRESETS

    target = PRESETS[spec["preset"]].target_return
    if clean < target:
        return (f"its clean return on the machine, {clean:g}, is below the preset's target {target:g} (a collapse?): "
                f"recorded, not placed; the next chunk resumes from {record['steps_before']} steps")
    return None


def place(job: str, files: Path, root: Path = REPO, force: bool = False) -> dict:
    """Check and copy the files of one returned chunk (a folder, or a tar of one); returns its record."""
    if files.is_file():
        import tarfile
        import tempfile

        with tempfile.TemporaryDirectory() as folder, tarfile.open(files) as archive:
            archive.extractall(folder, filter="data")  # plain files under the folder only
            return place(job, Path(folder), root, force)
    from rlgauntlet.common.hashing import sha256_file

    record = json.loads((files / "chunk.json").read_text())
    if record["job"] != job:
        raise SystemExit(f"{files} holds a chunk of {record['job']}, not {job}")
    for name, digest in record["files"].items():
        if sha256_file(files / name) != digest:
            raise SystemExit(f"{files / name} does not match the sha256 recorded on the machine; fetch it again")
    spec = JOBS[job]
    folder = root / spec["folder"]
    log = folder / "chunks.json"
    chunks = json.loads(log.read_text()) if log.exists() else []
    same = [i for i, c in enumerate(chunks)
            if c.get("finished") == record["finished"] and c.get("steps_after") == record["steps_after"]]
    if same and not (force and chunks[same[0]].get("placed") is False):
        raise SystemExit(f"this chunk ({record['steps_after']} steps) is already in place")
    if same:  # a chunk refused earlier, placed now on second thought: its record is replaced
        if chunks[-1] is not chunks[same[0]]:
            raise SystemExit(f"a later chunk has been recorded since this one ({record['steps_after']} steps); "
                             "placing this one now would throw that one's training away")
        chunks.pop(same[0])
    refused = _unhealthy(spec, record)
    if refused is not None and force:  # placed anyway: the record keeps what the check said
        record.update(forced=True, placed_despite=refused)
        refused = None
    if refused is not None:
        record.update(placed=False, not_placed_because=refused)
        folder.mkdir(parents=True, exist_ok=True)
        chunks.append(record)
        log.write_text(json.dumps(chunks, indent=2) + "\n")
        return record
    for source, name in spec["returns"].items():
        target = folder / source
        if name in OPTIONAL_RETURNS and name not in record["files"]:  # an old one would not fit the new checkpoint
            target.unlink(missing_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        shutil.copyfile(files / name, tmp)
        tmp.replace(target)
    if "checkpoint/policy.pt" in spec["returns"]:  # the parts are the checkpoint now: a zip left would win
        (folder / "checkpoint" / "model.zip").unlink(missing_ok=True)
    chunks.append(record)
    log.write_text(json.dumps(chunks, indent=2) + "\n")
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("job", choices=sorted(JOBS))
    parser.add_argument("files", type=Path, help="the chunk's returned files: their folder, or the JOB.tar")
    parser.add_argument("--root", type=Path, default=REPO)
    parser.add_argument("--force", action="store_true", help="place an agent whose evaluation fell below its target")
    args = parser.parse_args()
    record = place(args.job, args.files, args.root, args.force)
    if record.get("placed") is False:
        print(f"{args.job}: {record['not_placed_because']}")
        return
    print(f"{args.job}: {record['steps_before']} → {record['steps_after']} steps in {record.get('train_seconds', record.get('wall_seconds'))} s "
          f"({record['steps_per_second']} steps/s on {record.get('gpu', record['device'])})")


if __name__ == "__main__":
    main()
