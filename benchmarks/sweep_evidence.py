"""Evidence for sweeps: one sweep file run three ways must give the same episode rows.

1. the local executor, 2 workers, uninterrupted;
2. the local executor, with one worker process killed (SIGKILL) and later the driver killed
   (SIGKILL), then the same command re-run until it completes;
3. the Ray executor, on a Ray head with 2 CPUs inside a loopback-only network namespace
   (skipped, and said so in the JSON, where no namespace can be made).

Rows are compared as (threat spec, episode, seed, return, length), independent of run ids.

Usage: python benchmarks/sweep_evidence.py [--sweep sweeps/zoo.yaml] [--out benchmarks/results/sweep_evidence.json]
(from the repository root; stores go to runs/sweep-evidence/, the uninterrupted one is kept
for ``rlgauntlet report``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

CLI = [sys.executable, "-m", "rlgauntlet.cli"]


def episode_rows(store: Path) -> list[tuple]:
    conn = sqlite3.connect(store)
    try:
        rows = conn.execute("SELECT r.meta, e.episode, e.seed, e.episode_return, e.length FROM episodes e "
                            "JOIN runs r ON r.run_id = e.run_id").fetchall()
    except sqlite3.OperationalError:  # the schema is not written yet
        return []
    finally:
        conn.close()
    return sorted((json.loads(meta)["spec"], *rest) for meta, *rest in rows)


def children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]


def run(command: list[str], **kwargs) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed: {done.stderr[-2000:]}")
    return time.perf_counter() - start, done


def killed_and_resumed(sweep: Path, store: Path, total: int) -> dict:
    """Kill a worker once a tenth of the episodes is stored, the driver at a third; re-run."""
    proc = subprocess.Popen([*CLI, "sweep", str(sweep), "--store", str(store), "--workers", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    killed_worker_at = killed_driver_at = None
    while proc.poll() is None:
        stored = len(episode_rows(store))
        if killed_worker_at is None and stored >= total // 10:
            # the pool's processes are the driver's children besides the resource tracker
            pool = [p for p in children(proc.pid)
                    if "spawn_main" in Path(f"/proc/{p}/cmdline").read_text(errors="ignore")]
            if pool:
                os.kill(pool[0], signal.SIGKILL)
                killed_worker_at = stored
        if killed_worker_at is not None and stored >= total // 3:
            for p in children(proc.pid):
                os.kill(p, signal.SIGKILL)
            proc.kill()
            killed_driver_at = stored
            break
        time.sleep(0.5)
    proc.wait()
    kept = len(episode_rows(store))
    seconds, done = run([*CLI, "sweep", str(sweep), "--store", str(store), "--workers", "2"])
    return {"killed_worker_at_episodes": killed_worker_at, "killed_driver_at_episodes": killed_driver_at,
            "episodes_kept_after_kill": kept, "resume_seconds": round(seconds, 1),
            "resume_ran": _ran(done.stderr)}


def _ran(stderr: str) -> str | None:
    """The CLI's closing line, "ran N of M episodes in S s" (the console may wrap it)."""
    import re

    found = re.search(r"ran (\d+) of (\d+) episodes", " ".join(stderr.split()))
    return found.group(0) if found else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", type=Path, default=Path("sweeps/zoo.yaml"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/sweep_evidence.json"))
    parser.add_argument("--folder", type=Path, default=Path("runs/sweep-evidence"))
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))  # tools/netns.py: not installed
    from netns import RayNamespace, namespace_unavailable
    from rlgauntlet.experiments.sweep import load_sweep_file

    spec = load_sweep_file(args.sweep)
    args.folder.mkdir(parents=True, exist_ok=True)
    stores = {name: args.folder / f"{name}.sqlite" for name in ("local", "killed", "ray")}
    for path in stores.values():
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    result: dict = {"sweep": str(args.sweep), "spec": spec.model_dump(), "machine_cpus": os.cpu_count()}

    seconds, _ = run([*CLI, "sweep", str(args.sweep), "--store", str(stores["local"]), "--workers", "2"])
    reference = episode_rows(stores["local"])
    result["local"] = {"episodes": len(reference), "seconds": round(seconds, 1),
                       "episodes_per_second": round(len(reference) / seconds, 2)}
    print(f"local: {len(reference)} episodes in {seconds:.0f} s", flush=True)

    result["killed"] = killed_and_resumed(args.sweep, stores["killed"], len(reference))
    result["killed"]["same_rows_as_uninterrupted"] = episode_rows(stores["killed"]) == reference
    print(f"killed and resumed: {result['killed']}", flush=True)

    reason = namespace_unavailable()
    if reason is None:
        with RayNamespace(cpus=2) as ns:
            start = time.perf_counter()
            done = ns.run([*CLI, "sweep", str(args.sweep.resolve()), "--store", str(stores["ray"].resolve()),
                           "--executor", "ray", "--address", ns.address], timeout=7200)
            seconds = time.perf_counter() - start
        if done.returncode != 0:
            sys.exit(f"ray sweep failed: {done.stderr[-2000:]}")
        rows = episode_rows(stores["ray"])
        result["ray"] = {"episodes": len(rows), "seconds": round(seconds, 1),
                         "same_rows_as_local": rows == reference, "head": "2 CPUs, loopback-only network namespace"}
    else:
        result["ray"] = {"skipped": reason}
    print(f"ray: {result['ray']}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
