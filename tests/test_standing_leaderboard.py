"""The standing leaderboard: the published board's results ship with the package (numbers only),
and ``leaderboard --with-published`` ranks a user's agent among them without re-running the field."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlgauntlet.errors import UserError

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def _store(path: Path, runs: list[dict]) -> Path:
    """A results store holding gauntlet results: each ``runs`` item's identity and its worst case
    and clean return (the metrics the leaderboard ranks by)."""
    from rlgauntlet.experiments.store import ResultsStore, run_key

    store = ResultsStore(path)
    for r in runs:
        meta = {"protocol": "mujoco", "version": r.get("version", 5), "level": "standard", "env": r["env"],
                "agent": r["agent"], "sha256": r["sha256"], "method": r["method"]}
        run = store.create_run(run_key(meta), meta, kind="gauntlet")
        store.add_metric(run, f"worst_case@{r['eps']}", r["score"])
        store.add_metric(run, "clean_return", r["clean"])
    store.close()
    return path


FIELD = [{"env": "Hopper-v5", "eps": "0.075", "agent": "published:sa-ppo-hopper", "sha256": "a" * 64,
          "method": "SA-PPO (released)", "score": 1024.0, "clean": 3700.0},
         {"env": "Hopper-v5", "eps": "0.075", "agent": "published:ppo-hopper", "sha256": "b" * 64,
          "method": "PPO (released)", "score": 400.0, "clean": 3100.0},
         {"env": "Hopper-v5", "eps": "0.075", "agent": "sb3:/home/me/local.zip", "sha256": "c" * 64,
          "method": "a local file", "score": 10.0, "clean": 10.0},
         {"env": "Walker2d-v4", "eps": "0.05", "agent": "zoo:walker-ppo", "sha256": "d" * 64,
          "method": "PPO (zoo)", "score": 900.0, "clean": 4000.0},
         {"env": "Hopper-v5", "eps": "0.075", "agent": "published:ppo-hopper", "sha256": "b" * 64, "version": 4,
          "method": "PPO (released)", "score": 123.0, "clean": 3100.0}]


@pytest.fixture()
def shipped(tmp_path, monkeypatch):
    """The field's results written by :func:`ship` from a board's store into a stand-in for the
    package's results folder."""
    import rlgauntlet.published as published
    from rlgauntlet.gauntlet.leaderboard import ship

    data = ship([_store(tmp_path / "board.sqlite", FIELD)], "mujoco", 5, board="test board")
    folder = tmp_path / "shipped"
    folder.mkdir()
    (folder / "mujoco-v5.json").write_text(json.dumps(data))
    monkeypatch.setattr(published, "SHIPPED", folder)
    return data


def test_ship_keeps_numbers_of_catalogued_agents_of_one_version(shipped):
    agents = sorted(e["agent"] for e in shipped["entries"])
    # the local file (a path meaning nothing elsewhere) and the v4 result are left out
    assert agents == ["published:ppo-hopper", "published:sa-ppo-hopper", "zoo:walker-ppo"]
    assert all(set(e) == {"protocol", "version", "level", "env", "agent", "sha256", "method", "headline_eps",
                          "score", "unscored_reason", "clean", "natural_impact", "acr", "gwc", "warnings"}
               for e in shipped["entries"])
    ppo = next(e for e in shipped["entries"] if e["agent"] == "published:ppo-hopper")
    assert ppo["score"] == 400.0 and ppo["headline_eps"] == "0.075"  # v5's number, not v4's 123


def test_a_published_agent_run_without_a_method_ships_under_its_catalogue_label(tmp_path):
    """``gauntlet --agent published:NAME`` without ``--method`` stores the agent spec as its method;
    shipped, it is the catalogue's label, so the leaderboard groups it with the board's own rows.
    Any other agent keeps what it was given."""
    from rlgauntlet.gauntlet.leaderboard import ship

    unnamed = [{**FIELD[1], "method": "published:ppo-hopper"}, {**FIELD[3], "method": "zoo:walker-ppo"}]
    shipped = ship([_store(tmp_path / "b.sqlite", unnamed)], "mujoco", 5, "b")["entries"]
    entries = {e["agent"]: e["method"] for e in shipped}
    assert entries == {"published:ppo-hopper": "PPO (released)", "zoo:walker-ppo": "zoo:walker-ppo"}


def test_ship_takes_only_the_named_boards_agents_from_a_store_other_boards_share(tmp_path):
    """Boards that share one store ship one at a time: the agents (and envs) of the boards named,
    not every agent the store holds under that version."""
    from rlgauntlet.gauntlet.leaderboard import ship

    store = _store(tmp_path / "shared.sqlite", FIELD)
    only = {("published:ppo-hopper", "Hopper-v5"), ("zoo:walker-ppo", "Hopper-v5")}  # the zoo agent: another env
    assert [e["agent"] for e in ship([store], "mujoco", 5, "b", only=only)["entries"]] == ["published:ppo-hopper"]
    with pytest.raises(UserError, match="of the boards named"):
        ship([store], "mujoco", 5, "b", only={("published:wocar-ppo-hopper", "Hopper-v5")})


def test_a_users_agent_is_ranked_among_the_field(shipped, tmp_path):
    from rlgauntlet.gauntlet.leaderboard import leaderboard

    mine = _store(tmp_path / "mine.sqlite", [{"env": "Hopper-v5", "eps": "0.075", "agent": "sb3:my.zip",
                                              "sha256": "e" * 64, "method": "mine", "score": 700.0, "clean": 3000.0}])
    boards = leaderboard([mine], published=True)["boards"]
    hopper = next(b for b in boards if b["env"] == "Hopper-v5")
    assert [r["method"] for r in hopper["rows"]] == ["SA-PPO (released)", "mine", "PPO (released)"]
    members = {m["agent"]: m for r in hopper["rows"] for m in r["members"]}
    assert members["sb3:my.zip"]["shipped"] is False and members["published:ppo-hopper"]["shipped"] is True
    assert members["published:ppo-hopper"]["paper"]["strongest_attack"] == 636.4  # the README's, from the catalogue
    assert members["published:ppo-hopper"]["source"].startswith("https://github.com/huanzhang12/ATLA_robust_RL/blob/")
    # the whole field of the user's protocol version joins, every env of it
    assert [b["env"] for b in boards] == ["Hopper-v5", "Walker2d-v4"]
    assert [b["env"] for b in leaderboard([], published=True)["boards"]] == ["Hopper-v5", "Walker2d-v4"]


def test_an_agent_the_user_ran_too_counts_once_with_the_users_result(shipped, tmp_path):
    from rlgauntlet.gauntlet.leaderboard import leaderboard

    rerun = _store(tmp_path / "rerun.sqlite", [{**FIELD[1], "score": 350.0}])
    hopper = leaderboard([rerun], published=True)["boards"][0]
    ppo = next(r for r in hopper["rows"] if r["method"] == "PPO (released)")
    assert ppo["scores"] == [350.0] and ppo["members"][0]["shipped"] is False


def test_with_published_under_a_version_with_no_shipped_results_is_one_line(shipped, tmp_path, cli_main):
    old = _store(tmp_path / "old.sqlite", [FIELD[4]])
    from rlgauntlet.gauntlet.leaderboard import leaderboard

    with pytest.raises(UserError, match=r"ships the published board's results for mujoco v5, and your stores hold "
                                        r"results under mujoco v4"):
        leaderboard([old], published=True)
    proc = cli_main(["leaderboard", "--store", str(old), "--out", str(tmp_path / "out" / "b.html"),
                     "--with-published"])  # the package's own results: none under v4 either
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "--with-published" in lines[0], proc.stderr
    assert not (tmp_path / "out").exists()
    none = cli_main(["leaderboard", "--out", str(tmp_path / "b.html")])
    assert none.returncode == 2 and "--with-published for the field" in none.stderr


def test_a_board_of_a_version_whose_field_ships_for_other_envs_says_where_the_field_is(shipped, tmp_path, cli_env):
    import rlgauntlet.published as published
    from rlgauntlet.gauntlet.leaderboard import leaderboard, ship

    # a newer version ships task by task: here only one agent on another task
    newer = [{"env": "HopperMuJoCo15-v4", "eps": "0.075", "agent": "published:ppo-hopper", "sha256": "b" * 64,
              "method": "PPO (released)", "score": 149.0, "clean": 3394.0, "version": 6}]
    data = ship([_store(tmp_path / "v6.sqlite", newer)], "mujoco", 6, board="test board v6")
    (published.SHIPPED / "mujoco-v6.json").write_text(json.dumps(data))
    mine = _store(tmp_path / "mine.sqlite", [{"env": "Hopper-v5", "eps": "0.075", "agent": "sb3:my.zip", "version": 6,
                                              "sha256": "e" * 64, "method": "mine", "score": 700.0, "clean": 3000.0}])
    boards = {(b["env"], b["version"]): b for b in leaderboard([mine], published=True)["boards"]}
    assert [r["method"] for r in boards["Hopper-v5", 6]["rows"]] == ["mine"]  # alone: the v6 field has no Hopper-v5
    assert boards["Hopper-v5", 6]["field_under"] == ["mujoco@v5"]
    assert "field_under" not in boards["HopperMuJoCo15-v4", 6]  # the field is there
    assert "field_under" not in leaderboard([mine])["boards"][0]  # the field was not asked for
    # the CLI reads the package's own shipped results: say what they hold, whatever ships by then
    package = Path(published.__file__).parent / "results"
    shipped = sorted(package.glob("mujoco-v*.json"), key=lambda path: int(path.stem.split("-v")[1]))
    under = [f"mujoco@v{path.stem.split('-v')[1]}" for path in shipped
             if any(e["env"] == "Hopper-v5" for e in json.loads(path.read_text())["entries"])]
    proc = subprocess.run([sys.executable, "-m", "rlgauntlet.cli", "leaderboard", "--store", str(mine), "--out",
                           str(tmp_path / "b.md"), "--format", "markdown", "--with-published"],
                          capture_output=True, text=True, env=cli_env)
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stderr.split())
    if "mujoco@v6" in under:
        assert "the field is not on this board" not in said
    else:
        assert f"Hopper-v5 under mujoco v6: the field is not on this board; it ships under {' and '.join(under)}: " \
               f"run the gauntlet with --protocol {under[-1]}" in said


def test_a_shipped_file_of_another_format_is_refused(tmp_path, monkeypatch):
    import rlgauntlet.published as published

    (tmp_path / "mujoco-v5.json").write_text(json.dumps({"format": 99, "protocol": "mujoco", "version": 5}))
    monkeypatch.setattr(published, "SHIPPED", tmp_path)
    assert published.shipped_versions() == [("mujoco", 5)]
    with pytest.raises(UserError, match="reinstall rlgauntlet"):
        published.shipped_results("mujoco", 5)


def test_the_package_ships_results_of_its_own_mujoco_version():
    """What ships is readable, of the protocol's default version (the one a plain ``--protocol
    mujoco`` and a MuJoCo env's gauntlet run, so that their results rank among the field), and
    names only catalogued or zoo agents."""
    from rlgauntlet.gauntlet.protocols import get_protocol
    from rlgauntlet.published import shipped_results, shipped_versions

    mujoco = get_protocol("mujoco")
    assert ("mujoco", mujoco.version) in shipped_versions()
    data = shipped_results("mujoco", mujoco.version)
    assert data["entries"] and all(e["agent"].startswith(("published:", "zoo:")) for e in data["entries"])
    assert all(e["headline_eps"] == mujoco.headline_of(mujoco.version, e["env"]) for e in data["entries"])


def test_the_page_marks_the_fields_rows_and_links_each_row(shipped, tmp_path):
    from rlgauntlet.gauntlet.leaderboard import leaderboard
    from rlgauntlet.report.leaderboard import render_leaderboard

    run = tmp_path / "run"
    run.mkdir()
    mine = _store(run / "gauntlet.sqlite", [{"env": "Hopper-v5", "eps": "0.075", "agent": "sb3:my.zip",
                                             "sha256": "e" * 64, "method": "mine", "score": 700.0, "clean": 3000.0}])
    (run / "gauntlet.json").write_text(json.dumps({"agent": {"sha256": "e" * 64}}))
    (run / "report.html").write_text("<html></html>")
    page = render_leaderboard(leaderboard([mine], published=True), tmp_path / "pages" / "board.html")
    html = page.read_text()
    assert html.count('data-shipped="yes"') == 3 and html.count('data-shipped="no"') == 1  # Walker2d's zoo row too
    assert '<a href="../run/report.html">sb3:my.zip</a>' in html  # relative to the page
    assert "https://github.com/huanzhang12/ATLA_robust_RL/blob/" in html
    # Hopper mixes the field's rows and the user's: the page says the user's did not face the field's directors
    assert html.count('class="meta transfer-note"') == 1  # Walker2d holds the field's rows only


@pytest.mark.slow
def test_the_standing_leaderboard_in_headless_chromium(shipped, tmp_path):
    playwright = pytest.importorskip("playwright.sync_api", reason="pip install 'rlgauntlet[browser]'")
    if not Path(CHROMIUM).exists():
        pytest.skip("no Chromium: apt-get install chromium (make test-slow does)")
    test_the_page_marks_the_fields_rows_and_links_each_row(shipped, tmp_path)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page()
            page.goto((tmp_path / "pages" / "board.html").resolve().as_uri())
            rows = page.evaluate("[...document.querySelectorAll('table.agents tr[data-agent]')]"
                                 ".map(r => [r.dataset.agent, r.dataset.shipped, r.getBoundingClientRect().height > 0])")
            link = page.evaluate("document.querySelector('a[href=\"../run/report.html\"]').href")
        finally:
            browser.close()
    assert [r[0] for r in rows] == ["published:sa-ppo-hopper", "sb3:my.zip", "published:ppo-hopper", "zoo:walker-ppo"]
    assert all(visible for *_, visible in rows) and link.endswith("/run/report.html")


def test_an_unscored_agent_of_a_ranked_method_is_left_out_of_the_agents_table(tmp_path):
    """A method with one scored and one unscored agent: the page lists the scored one in its agents'
    table (the unscored one is in the board's 'not ranked' line), without failing on the missing score."""
    from rlgauntlet.experiments.store import ResultsStore, run_key
    from rlgauntlet.gauntlet.leaderboard import leaderboard
    from rlgauntlet.report.leaderboard import render_leaderboard

    path = _store(tmp_path / "s.sqlite", [{"env": "Hopper-v5", "eps": "0.075", "agent": "zoo:a", "sha256": "a" * 64,
                                           "method": "m", "score": 500.0, "clean": 3000.0}])
    store = ResultsStore(path)
    meta = {"protocol": "mujoco", "version": 5, "level": "standard", "env": "Hopper-v5", "agent": "zoo:b",
            "sha256": "b" * 64, "method": "m"}
    store.add_metric(store.create_run(run_key(meta), meta, kind="gauntlet"), "clean_return", 100.0)  # no worst case
    store.close()
    html = render_leaderboard(leaderboard([path]), tmp_path / "b.html").read_text()
    assert 'data-agent="zoo:a"' in html and 'data-agent="zoo:b"' not in html and "zoo:b (m: no worst case" in html


def test_markdown_and_latex_carry_the_agents_table_beside_the_papers_numbers(shipped, tmp_path):
    from rlgauntlet.gauntlet.leaderboard import leaderboard
    from rlgauntlet.report.tables import board_latex, board_markdown

    mine = _store(tmp_path / "mine.sqlite", [{"env": "Hopper-v5", "eps": "0.075", "agent": "sb3:my.zip",
                                              "sha256": "e" * 64, "method": "mine", "score": 700.0, "clean": 3000.0}])
    text = board_markdown(leaderboard([mine], published=True))
    assert "| published:ppo-hopper | PPO (released) | 3100 | 400 | 3167 | 636 | the published board |" in text
    assert "| sb3:my.zip | mine | 3000 | 700 | – | – | your store |" in text
    tex = board_latex(leaderboard([mine], published=True))
    assert r"published:ppo-hopper & PPO (released) & 3100 & 400 & 3167 & 636 & the published board \\" in tex
    alone = board_markdown(leaderboard([mine]))  # no paper's numbers, nothing shipped: the ranking only
    assert "paper: natural" not in alone


def test_the_latest_result_is_the_one_computed_last_not_the_run_created_last(tmp_path):
    """A board's run of an agent, then a single-agent gauntlet of it (another method name: a run of
    its own, created later), then the board again (it rewrites its own, earlier run): the board's
    number is the latest. Ordering by run creation would keep the single-agent one."""
    import time

    from rlgauntlet.experiments.store import ResultsStore, run_key
    from rlgauntlet.gauntlet.leaderboard import gauntlet_entries

    path = tmp_path / "board.sqlite"
    store = ResultsStore(path)
    metas = [{"protocol": "mujoco", "version": 5, "level": "standard", "env": "Hopper-v5", "agent": "zoo:a",
              "sha256": "f" * 64, "method": method} for method in ("on the board", "alone")]
    board, alone = (store.create_run(run_key(m), m, kind="gauntlet") for m in metas)
    store.add_metric(board, "worst_case@0.075", 1509.0)
    store.add_metric(alone, "worst_case@0.075", 1625.0)
    assert [e["score"] for e in gauntlet_entries([path])] == [1625.0]
    time.sleep(0.01)
    store.add_metric(board, "worst_case@0.075", 1509.0)  # the board run again
    store.close()
    [entry] = gauntlet_entries([path])
    assert (entry["score"], entry["method"], entry["run_id"]) == (1509.0, "on the board", board)


def test_shipping_again_adds_to_what_ships_and_replaces_only_the_stores_agents(shipped, tmp_path):
    from rlgauntlet.gauntlet.leaderboard import ship

    later = [dict(FIELD[1], score=250.0),  # the same agent and env again: its new number replaces the shipped one
             {"env": "HumanoidMuJoCo15-v4", "eps": "0.075", "agent": "published:median-ppo-humanoid",
              "sha256": "e" * 64, "method": "PPO (released, median)", "score": 542.0, "clean": 4734.0}]
    data = ship([_store(tmp_path / "later.sqlite", later)], "mujoco", 5, board="humanoid, test board",
                previous=shipped)
    scores = {(e["agent"], e["env"]): e["score"] for e in data["entries"]}
    assert scores == {("published:ppo-hopper", "Hopper-v5"): 250.0, ("published:sa-ppo-hopper", "Hopper-v5"): 1024.0,
                      ("zoo:walker-ppo", "Walker2d-v4"): 900.0,
                      ("published:median-ppo-humanoid", "HumanoidMuJoCo15-v4"): 542.0}
    assert data["board"] == "test board, humanoid"  # each board named once, the earlier first
    with pytest.raises(UserError, match="ship each version on its own"):
        ship([tmp_path / "later.sqlite"], "mujoco", 6, board="b", previous=shipped)


def test_the_default_version_moves_only_to_a_version_that_ships_every_env_it_ships():
    """docs/decisions.md, "When the default version moves": every env an older shipped version ships,
    the default ships too (a default moved too early, stranding users' results on an env, fails), and
    no newer shipped version covers every env the default ships (a default left behind fails)."""
    from rlgauntlet.gauntlet.protocols import get_protocol
    from rlgauntlet.published import shipped_results, shipped_versions

    default = get_protocol("mujoco").version

    def envs(version: int) -> set[str]:
        return {e["env"] for e in shipped_results("mujoco", version)["entries"]}

    versions = [v for name, v in shipped_versions() if name == "mujoco"]
    for version in versions:
        if version < default:
            stranded = envs(version) - envs(default)
            assert not stranded, f"the default mujoco v{default} ships nothing on {sorted(stranded)}"
        elif version > default:
            assert envs(default) - envs(version), f"mujoco v{version} ships every env v{default} ships: " \
                "move DEFAULT_VERSIONS to it"


def test_every_shipped_version_holds_that_versions_rows_of_the_catalogued_files():
    """Each shipped file (v5, v6, v8, ...) is of its own version throughout, at that version's headline
    ε on each env, and each release's row is of the catalogue's file (its sha256, never missing) on
    the catalogue's task (its own physics or today's: Hopper-v5 beside HopperMuJoCo15-v4): a file
    shipped under the wrong tag, a row of another agent file, or a Hopper file's row on Walker2d
    fails here."""
    from rlgauntlet.envs.presets import mujoco_task
    from rlgauntlet.gauntlet.protocols import get_protocol
    from rlgauntlet.published import release, shipped_results, shipped_versions

    assert shipped_versions()
    for name, version in shipped_versions():
        protocol = get_protocol(f"{name}@v{version}")
        data = shipped_results(name, version)
        assert (data["protocol"], data["version"]) == (name, version)
        for entry in data["entries"]:
            assert (entry["protocol"], entry["version"]) == (name, version), entry["agent"]
            assert entry["headline_eps"] == protocol.headline_of(version, entry["env"]), entry["agent"]
            if entry["agent"].startswith("published:"):
                catalogued = release(entry["agent"].removeprefix("published:"))
                assert entry["sha256"] is not None and entry["sha256"] == catalogued["sha256"], entry["agent"]
                assert mujoco_task(entry["env"]) == mujoco_task(catalogued["env"]), entry["agent"]
                assert entry["method"] == catalogued["label"], entry["agent"]  # grouped as its board names it


def test_the_readme_table_of_shipped_results_counts_what_the_package_ships():
    """README.md's table of shipped results (one row per `mujoco` version) names each env with its
    agent count and the total; each must be what `shipped_results` holds for that version, so a
    board shipped (or replaced) without the README brought up to date fails here."""
    import re
    from collections import Counter

    from rlgauntlet.published import shipped_results, shipped_versions

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    text = readme[readme.index("| version | how to run it |"):].split("\n\n")[0]  # that table only
    rows = {int(v): cells for v, cells in re.findall(r"^\| v(\d+) \| [^|]+ \| ([^|]+) \|", text, flags=re.M)}
    versions = [v for protocol, v in shipped_versions() if protocol == "mujoco"]
    assert sorted(rows) == sorted(versions)  # a row for every shipped version, and none for another
    for version, cells in rows.items():
        shipped = Counter(entry["env"] for entry in shipped_results("mujoco", version)["entries"])
        total = int(re.search(r": (\d+)\s*$", cells).group(1))
        assert total == sum(shipped.values()), f"v{version}: the README says {total} agents"
        named = {env: int(n) for env, n in re.findall(r"`([A-Za-z0-9]+-v\d)` \((\d+)\)", cells)}
        if named:  # a row naming its envs names each one with its count
            assert named == dict(shipped), f"v{version}: the README says {named}"
