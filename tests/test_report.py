"""The HTML report card: known numbers from a hand-made store, sections present exactly when
the store holds their runs, every run link resolves, nothing is fetched at view time, and (slow)
a real headless Chromium renders it with no broken image."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from rlgauntlet.engine.rollout import EpisodeRecord
from rlgauntlet.errors import UserError
from rlgauntlet.experiments.evaluations import strongest_rows
from rlgauntlet.experiments.runs import summarize
from rlgauntlet.experiments.store import ResultsStore, run_key
from rlgauntlet.report.data import threat_family
from rlgauntlet.report.html import render_report, report_context

CLI = [sys.executable, "-m", "rlgauntlet.cli"]
ENV = {"id": "CartPole-v1", "preset": "classic"}


def agent(name: str) -> dict:
    return {"source": "zoo", "name": name, "path": f"zoo/{name}.zip", "algorithm": "dqn", "sha256": "ab" * 32}


def add_run(store: ResultsStore, who: str, spec: str, returns: list[float], eps: float | None = None,
            kind: str = "evaluation", space: str = "raw", seed: int = 0) -> int:
    meta = {"agent": agent(who), "env": ENV, "threat": spec.split(":")[0], "spec": spec, "seed": seed,
            "budget_space": space, "place": None if spec == "clean" else "observation",
            "params": {} if eps is None else {"eps": eps}}
    run_id = store.create_run(run_key({**meta, "kind": kind}), meta, kind=kind)
    for k, ret in enumerate(returns):
        store.add_episode(run_id, EpisodeRecord(episode=k, seed=k, episode_return=ret, length=int(ret) + 1,
                                                perturbed_steps=0 if spec == "clean" else int(ret) + 1,
                                                linf_sum=0.0 if spec == "clean" else (eps or 0.1) * (int(ret) + 1),
                                                linf_max=eps or 0.0))
    return run_id


def evaluation(store: ResultsStore, run_id: int) -> dict:
    meta = store.run_meta(run_id)
    summary = summarize(store.episodes(run_id), meta["threat"], meta["spec"], 0, "raw", 0.0)
    return {**summary, "run_id": run_id}


@pytest.fixture
def store_path(tmp_path) -> Path:
    """Two agents on CartPole: a weak one and a robust one, each clean, under a natural
    threat and two attacks at two budgets with strongest-of rows; the weak one also certified,
    under a model-based baseline and scored for OOD detection."""
    path = tmp_path / "runs.sqlite"
    store = ResultsStore(path)
    for who, scale in (("weak-dqn", 1.0), ("robust-dqn", 4.0)):
        add_run(store, who, "clean", [500.0, 500.0, 500.0, 500.0])
        add_run(store, who, "gaussian_noise:std=0.1", [400.0, 450.0, 500.0, 350.0])
        evals = []
        for eps in (0.1, 0.2):
            evals.append(evaluation(store, add_run(store, who, f"pgd:eps={eps}", [scale * 10 / eps] * 3 + [scale * 20 / eps], eps)))
            evals.append(evaluation(store, add_run(store, who, f"random:eps={eps}", [300.0, 310.0, 320.0, 330.0], eps)))
        strongest_rows(evals, [e["spec"] for e in evals], store, seed=0)
    gwc = add_run(store, "weak-dqn", "gwc:eps=0.05", [120.0, 80.0], kind="certification")
    store.add_metric(gwc, "acr", 0.625, "fraction of clean-trajectory steps")
    add_run(store, "weak-dqn", "flip:eps=0.3", [42.0, 44.0], eps=0.3)
    meta = {"agent": "weak-dqn", "env": ENV, "shift": "physics:param=length,scale=4", "reduce": "mean", "seed": 0,
            "episodes": 10, "trials": 5, "detector": "ensemble", "nominal_runs": [], "shifted_runs": []}
    ood = store.create_run(run_key(meta), meta, kind="ood")
    store.add_metric(ood, "auroc", 0.8125, "AUROC", [0.8, 0.825])
    store.add_metric(ood, "auroc_std", 0.0177, "std")
    store.add_metric(ood, "fpr95", 0.375, "FPR95")
    store.close()
    return path


class Page(HTMLParser):
    """Ids, links, images, scripts and text of a rendered page."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.ids, self.links, self.images, self.sections, self.scripts, self.external = set(), [], [], [], 0, []
        self.text = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        if tag == "img":
            self.images.append(a.get("src", ""))
        if "data-section" in a:
            self.sections.append((a.get("id"), a["data-section"]))
        if tag == "script":
            self.scripts += 1
        for key in ("src", "href"):
            if a.get(key, "").startswith(("http:", "https:", "//")):
                self.external.append(a[key])

    def handle_data(self, data):
        self.text.append(data)


def test_threat_families():
    assert [threat_family(s) for s in ("rotation:degrees=3", "gaussian_noise:std=0.1", "physics:param=m,scale=2",
                                       "pgd:eps=0.1", "fgsm", "maxdiff", "paad:attacker=x", "model_obs:eps=0.1",
                                       "flip:eps=0.1", "gwc:eps=0.1", "clean")] == \
        ["natural", "natural", "natural", "adversarial", "adversarial", "adversarial", "learned", "model_based",
         "model_based", "certified", "other"]


def test_report_numbers_sections_and_links(store_path, tmp_path):
    out = render_report([store_path], tmp_path / "report.html")
    html = out.read_text()
    page = Page(html)
    text = " ".join(page.text)
    # known answers: gaussian noise on the weak agent, returns 400, 450, 500, 350
    returns = np.array([400.0, 450.0, 500.0, 350.0])
    assert f"{returns.mean():.4g}" in text and f"{returns.std(ddof=1) / 2:.3g}" in text  # 425 and 32.3
    context = report_context([ResultsStore(store_path)])
    weak_natural = next(s["data"] for g in context["groups"] if g["label"] == "weak-dqn"
                        for s in g["sections"] if s["key"] == "natural")
    [noise] = weak_natural["rows"]
    assert noise["spec"] == "gaussian_noise:std=0.1" and noise["return_mean"] == 425.0
    assert math.isclose(noise["return_sem"], returns.std(ddof=1) / 2) and noise["episodes"] == 4
    # the ACR, AUROC and FPR95 as stored; the GWC mean of 120 and 80
    assert "62%" in text and "0.812" in text and "0.375" in text and "100" in text
    weak = {key for sid, key in page.sections if sid and sid.startswith("agent-weak-dqn")}
    robust = {key for sid, key in page.sections if sid and sid.startswith("agent-robust-dqn")}
    assert weak == {"overview", "natural", "adversarial", "model_based", "certified", "ood"}
    assert robust == {"overview", "natural", "adversarial"}  # nothing certified or OOD in the store for it
    assert {"appendix", "comparison"} <= {key for _, key in page.sections}
    # every run link resolves to the appendix entry of its run; every run the report uses is listed
    run_links = [link[1:] for link in page.links if link.startswith("#run-")]
    assert run_links and set(run_links) <= page.ids
    assert len({i for i in page.ids if i.startswith("run-")}) == len(ResultsStore(store_path).runs())
    # self-contained: every image embedded, no script, nothing external
    assert page.images and all(src.startswith("data:image/png;base64,") for src in page.images)
    assert page.scripts == 0 and page.external == []


def test_strongest_of_and_comparison_rank_the_robust_agent_first(store_path):
    context = report_context([ResultsStore(store_path)])
    view = context["comparisons"][0]
    assert view["env"] == "CartPole-v1" and view["budgets"] == [0.1, 0.2]
    assert [r["label"] for r in view["ranking"]] == ["robust-dqn", "weak-dqn"]
    weak = next(r for r in view["ranking"] if r["label"] == "weak-dqn")
    # weak agent at 0.2: pgd returns 50, 50, 50, 100 (mean 62.5) beat random's 315
    at_02 = weak["strongest"][1]
    assert at_02["winner"] == "pgd:eps=0.2" and math.isclose(at_02["return_mean"], 62.5)
    assert math.isclose(at_02["return_sem"], np.std([50, 50, 50, 100], ddof=1) / 2)
    assert at_02["by_attack"] == {"pgd:eps=0.2": 62.5, "random:eps=0.2": 315.0}
    # the robust agent at 0.1: pgd gives 400, 400, 400, 800 (650) > random 315, so random wins
    robust = view["ranking"][0]
    assert robust["strongest"][0]["winner"] == "random:eps=0.1"
    specs = [t["spec"] for t in view["table"]]
    assert specs[0] == "clean" and "flip:eps=0.3" not in specs  # only the weak agent ran flip
    assert len(specs) == 6 and all(None not in t["cells"] for t in view["table"])


def test_each_agents_own_learned_attackers_share_a_comparison_row_the_strongest_shown(tmp_path):
    from rlgauntlet.report.sections import comparison_key

    assert comparison_key("paad:attacker=runs/a/vanilla-1f2e/paad,eps=0.075") == "paad:attacker=(own),eps=0.075"
    assert comparison_key("robust_sarsa:q=runs/x,eps=0.075") == "robust_sarsa:q=(own),eps=0.075"
    assert comparison_key("pgd:eps=0.1,steps=10") == "pgd:eps=0.1,steps=10"
    # a push along each agent's own chosen direction shares a row; its other parameters do not
    assert comparison_key("push:eps=0.1,direction=1|-1|0,steps=5") == "push:eps=0.1,direction=(own),steps=5"
    assert comparison_key('paad:attacker="runs/a,b=1",eps=0.1') == "paad:attacker=(own),eps=0.1"  # quoted, commas
    store = ResultsStore(tmp_path / "s.sqlite")
    for who, attacker, rs_returns in (("weak-ppo", "runs/weak", ([300.0, 320.0], [100.0, 140.0])),
                                      ("robust-ppo", "runs/robust", ([450.0, 470.0], [480.0, 500.0]))):
        add_run(store, who, "clean", [500.0, 500.0])
        add_run(store, who, f"paad:attacker={attacker}/paad,eps=0.1", [50.0, 70.0] if who == "weak-ppo" else
                [400.0, 420.0], eps=0.1)
        for k, returns in enumerate(rs_returns):  # two Robust Sarsa Q functions of each agent
            add_run(store, who, f"robust_sarsa:q={attacker}/rs{k},eps=0.1", returns, eps=0.1)
    store.close()
    view = report_context([ResultsStore(tmp_path / "s.sqlite")])["comparisons"][0]
    table = {t["spec"]: [c["return_mean"] for c in t["cells"]] for t in view["table"]}
    order = view["agents"]
    assert table["paad:attacker=(own),eps=0.1"] == [{"weak-ppo": 60.0, "robust-ppo": 410.0}[a] for a in order]
    # the strongest of each agent's two Q functions: weak 120 (not 310), robust 460 (not 490)
    assert table["robust_sarsa:q=(own),eps=0.1"] == [{"weak-ppo": 120.0, "robust-ppo": 460.0}[a] for a in order]


def test_a_report_of_chosen_runs_shows_only_them_under_the_names_given(tmp_path):
    """A table reports one chosen run per cell (e.g. the strongest of several attackers, or the
    median seed): a report of just those runs must neither show the others nor let them win a
    comparison row, and renamed agents appear under their new name only."""
    store = ResultsStore(tmp_path / "s.sqlite")
    chosen = {add_run(store, "ppo-seed2", "clean", [500.0, 500.0]),
              add_run(store, "ppo-seed2", "paad:attacker=runs/new/paad,eps=0.1", [300.0, 320.0], eps=0.1)}
    add_run(store, "ppo-seed2", "paad:attacker=runs/old/paad,eps=0.1", [10.0, 30.0], eps=0.1)  # not chosen
    add_run(store, "ppo-seed1", "clean", [100.0, 100.0])  # another seed, not chosen
    chosen |= {add_run(store, "vanilla", "clean", [480.0, 500.0]),
               add_run(store, "vanilla", "paad:attacker=runs/v/paad,eps=0.1", [40.0, 60.0], eps=0.1)}
    store.close()
    stores = [ResultsStore(tmp_path / "s.sqlite")]
    context = report_context(stores, runs={(0, r) for r in chosen}, labels={"ppo-seed2": "PPO (median seed 2)"})
    view = context["comparisons"][0]
    assert set(view["agents"]) == {"PPO (median seed 2)", "vanilla"}
    table = {t["spec"]: [c["return_mean"] for c in t["cells"]] for t in view["table"]}
    expect = {"PPO (median seed 2)": 310.0, "vanilla": 50.0}  # the unchosen 20.0 would win the row
    assert table["paad:attacker=(own),eps=0.1"] == [expect[a] for a in view["agents"]]
    assert {a["ref"].run_id for a in context["appendix"]} == chosen
    html = render_report([tmp_path / "s.sqlite"], tmp_path / "r.html", runs={(0, r) for r in chosen},
                         labels={"ppo-seed2": "PPO (median seed 2)"}).read_text()
    assert "ppo-seed1" not in html and "runs/old/paad" not in html and "PPO (median seed 2)" in html
    with pytest.raises(UserError, match="run 99 is not in s.sqlite"):
        report_context(stores, runs={(0, 99)})
    with pytest.raises(UserError, match="store 1"):
        report_context(stores, runs={(1, 1)})


def test_user_text_is_escaped(tmp_path):
    store = ResultsStore(tmp_path / "s.sqlite")
    add_run(store, "<b>bold</b>", "clean", [1.0, 2.0])
    store.close()
    html = render_report([tmp_path / "s.sqlite"], tmp_path / "r.html").read_text()
    assert "<b>bold</b>" not in html and "&lt;b&gt;bold&lt;/b&gt;" in html


def test_report_cli_errors_and_never_replaces_a_foreign_file(store_path, tmp_path):
    foreign = tmp_path / "notes.html"
    foreign.write_text("<html>mine</html>")
    done = subprocess.run([*CLI, "report", "--store", str(store_path), "--out", str(foreign)], capture_output=True,
                          text=True)
    assert done.returncode == 2 and "left untouched" in done.stderr and foreign.read_text() == "<html>mine</html>"
    done = subprocess.run([*CLI, "report", "--store", str(tmp_path / "missing.sqlite"), "--out",
                           str(tmp_path / "r.html")], capture_output=True, text=True)
    assert done.returncode == 2 and "does not exist" in done.stderr and "Traceback" not in done.stderr
    ok = subprocess.run([*CLI, "report", "--store", str(store_path), "--out", str(tmp_path / "r.html")],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    again = subprocess.run([*CLI, "report", "--store", str(store_path), "--out", str(tmp_path / "r.html")],
                           capture_output=True, text=True)
    assert again.returncode == 0, again.stderr  # our own report is replaced
    with pytest.raises(UserError, match="no runs"):
        render_report([store_path], tmp_path / "x.html", agents=["nobody"])


# --- in a real browser ---------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


@pytest.mark.slow
def test_headless_chromium_renders_every_section_and_no_broken_image(store_path, tmp_path):
    """`make test-slow` installs Chromium (Debian package) and Playwright; elsewhere this skips."""
    playwright = pytest.importorskip("playwright.sync_api", reason="pip install 'rlgauntlet[browser]'")
    if not Path(CHROMIUM).exists():
        pytest.skip("no Chromium: apt-get install chromium (make test-slow does)")
    out = render_report([store_path], tmp_path / "report.html")
    expected = {key for _, key in Page(out.read_text()).sections}
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(out.resolve().as_uri())
            page.wait_for_load_state("load")
            broken = page.evaluate("[...document.images].filter(i => !i.complete || i.naturalWidth === 0)"
                                   ".map(i => i.alt)")
            visible = page.evaluate("[...document.querySelectorAll('[data-section]')]"
                                    ".filter(e => e.getBoundingClientRect().height > 0).map(e => e.dataset.section)")
            images = page.evaluate("document.images.length")
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        finally:
            browser.close()
    assert broken == [] and images >= 1
    assert set(visible) == expected
    from PIL import Image

    shot = np.asarray(Image.open(tmp_path / "report.png").convert("L"), dtype=float)
    assert shot.shape[0] > 900 and shot.std() > 10  # a long page with content, not a blank one


def test_example_frames_of_an_image_agent_are_the_threat_applied_to_the_agents_input(tmp_path):
    """Pong zoo agent: the example pair is the network input's last frame and the same frame
    through the threat; brightness +40 with contrast 1 is clip(frame + 40) pixel for pixel."""
    import base64
    import io

    from PIL import Image

    from rlgauntlet.report.data import load_groups
    from rlgauntlet.report.examples import natural_examples

    store = ResultsStore(tmp_path / "pong.sqlite")
    for spec in ("clean", "brightness_contrast:alpha=1,beta=40", "obs_delay:steps=1"):
        meta = {"agent": {"source": "zoo", "name": "pong-ppo"}, "env": {"id": "PongNoFrameskip-v4", "preset": "atari"},
                "threat": spec.split(":")[0], "spec": spec, "seed": 0, "budget_space": "pixel01",
                "place": None if spec == "clean" else "observation", "params": {}}
        run_id = store.create_run(run_key(meta), meta)
        store.add_episode(run_id, EpisodeRecord(episode=0, seed=0, episode_return=21.0, length=100))
    group = load_groups([store])[0]
    assert group.is_image
    examples = natural_examples(group, ["brightness_contrast:alpha=1,beta=40", "obs_delay:steps=1"])
    assert [e["spec"] for e in examples] == ["brightness_contrast:alpha=1,beta=40"]  # a delay has no single frame

    def pixels(uri: str) -> np.ndarray:
        image = np.asarray(Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))), dtype=int)
        return image[::2, ::2]  # drawn twice as large

    clean, bright = pixels(examples[0]["clean"]), pixels(examples[0]["perturbed"])
    assert clean.shape == (84, 84) and clean.std() > 0  # a game frame, not a blank one
    assert np.array_equal(bright, np.minimum(clean + 40, 255))
    html = render_report([tmp_path / "pong.sqlite"], tmp_path / "r.html").read_text()
    assert html.count('alt="clean frame"') == 1


def test_seeds_are_pooled_and_a_rerun_replaces_its_seed(tmp_path):
    """Two seeds of one spec: one row whose mean and sem are over both seeds' episodes, linking
    both runs; a later run of the same seed replaces the earlier one."""
    from rlgauntlet.report.data import load_groups

    store = ResultsStore(tmp_path / "s.sqlite")
    add_run(store, "dqn", "clean", [500.0, 500.0])
    add_run(store, "dqn", "pgd:eps=0.1", [999.0, 999.0], eps=0.1, seed=0)  # replaced by the rerun below
    first = add_run(store, "dqn", "pgd:eps=0.1", [100.0, 200.0], eps=0.1, seed=0)
    second = add_run(store, "dqn", "pgd:eps=0.1", [300.0, 400.0], eps=0.1, seed=7)
    ev = load_groups([store])[0].evaluations["pgd:eps=0.1"]
    assert [r.run_id for r in ev.refs] == [first, second] and ev.seeds == [0, 7]
    returns = np.array([100.0, 200.0, 300.0, 400.0])
    assert ev.summary["episodes"] == 4 and math.isclose(ev.summary["return_mean"], 250.0)
    assert math.isclose(ev.summary["return_sem"], returns.std(ddof=1) / 2)
    store.close()
    html = render_report([tmp_path / "s.sqlite"], tmp_path / "r.html").read_text()
    assert f'href="#run-0-{first}"' in html and f'href="#run-0-{second}"' in html and ">0, 7<" in html
