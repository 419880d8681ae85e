"""``rlgauntlet published fetch``: the clones of the catalogue's repositories, at the catalogued
commit, every release file checked by sha256 after; a clone already there is never touched, and
something else where a clone goes is refused before anything runs. A local repository stands in
for GitHub (these machines reach no git host)."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest

from rlgauntlet import published
from rlgauntlet.errors import UserError

PATH = "models/agent.model"


def _git(*args, cwd=None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture()
def source(tmp_path, monkeypatch):
    """A repository whose first commit holds the released file and whose second edits it; the
    catalogue names the first commit and that file's sha256."""
    repo = tmp_path / "upstream" / "Repo"
    (repo / "models").mkdir(parents=True)
    _git("init", "-q", str(repo))
    for key, value in (("user.email", "t@example.invalid"), ("user.name", "t")):
        _git("config", key, value, cwd=repo)
    (repo / PATH).write_bytes(b"released weights")
    _git("add", ".", cwd=repo)
    _git("commit", "-qm", "release", cwd=repo)
    released = _git("rev-parse", "HEAD", cwd=repo)
    (repo / PATH).write_bytes(b"later weights")
    _git("commit", "-qam", "later", cwd=repo)
    fake = {"repositories": {"someone/Repo": str(repo)}, "commits": {"someone/Repo": released},
            "releases": [{"name": "agent", "repository": "someone/Repo", "path": PATH,
                          "sha256": hashlib.sha256(b"released weights").hexdigest()}]}
    monkeypatch.setattr(published, "catalogue", lambda: fake)
    return repo, released


def test_fetch_clones_at_the_catalogued_commit_checks_every_file_and_leaves_a_clone_alone(source, tmp_path):
    repo, released = source
    root = tmp_path / "clones"
    assert [r["state"] for r in published.fetch_plan(root)] == ["missing"]
    assert published.fetch(root) == [{"name": "agent", "repository": "someone/Repo", "ok": True}]
    assert _git("rev-parse", "HEAD", cwd=root / "Repo") == released  # not the later commit
    assert (root / "Repo" / PATH).read_bytes() == b"released weights"
    ran = []
    again = published.fetch(root, run=ran.append)
    assert ran == [] and again[0]["ok"]  # an existing clone: nothing runs
    (root / "Repo" / PATH).write_bytes(b"edited")  # the user's clone: reported, never restored
    [row] = published.fetch(root, run=ran.append)
    assert not row["ok"] and "another version of the file" in row["problem"] and ran == []
    assert (root / "Repo" / PATH).read_bytes() == b"edited"


def test_something_in_the_way_or_a_failing_clone_is_one_line_and_nothing_else_runs(source, tmp_path, monkeypatch):
    root = tmp_path / "clones"
    root.mkdir()
    (root / "Repo").write_text("not a clone")
    ran = []
    with pytest.raises(UserError, match="is in the way of the clone of someone/Repo") as caught:
        published.fetch(root, run=ran.append)
    assert "\n" not in str(caught.value) and ran == [] and (root / "Repo").read_text() == "not a clone"
    fake = published.catalogue()
    monkeypatch.setattr(published, "catalogue", lambda: {**fake, "repositories": {"someone/Repo": str(tmp_path / "nowhere")}})
    with pytest.raises(UserError, match=r"failed .*remove .*other/Repo and run `rlgauntlet published fetch --run` again") as caught:
        published.fetch(tmp_path / "other")
    assert "\n" not in str(caught.value)
    monkeypatch.setattr(published, "catalogue", lambda: fake)  # the repository reachable again: the fix works
    assert published.fetch(tmp_path / "other")[0]["ok"]


def test_the_cli_prints_one_clone_and_checkout_per_missing_repository(tmp_path, cli_env):
    proc = subprocess.run([sys.executable, "-m", "rlgauntlet.cli", "published", "fetch"], capture_output=True,
                          text=True, env={**cli_env, "RLGAUNTLET_RELEASES": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    catalogue = published.catalogue()
    assert len(lines) == len(catalogue["repositories"])
    for line, (repository, url) in zip(lines, catalogue["repositories"].items()):
        folder = tmp_path / repository.split("/")[1]
        assert line == (f"git clone {url} {folder} && git -c advice.detachedHead=false -C {folder} checkout "
                        f"{catalogue['commits'][repository]}")
    assert not any(tmp_path.iterdir())  # printing clones nothing
