"""What every command shares: the app and its groups, the consoles, one definition of each
agent option, the checks on outputs (before any work), the JSON writer and the tables.

The CLI only parses, prints and writes; the library computes. Every command reports bad input
as one line on stderr and exits with status 2.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from rlgauntlet.common.outputs import check_output, write_json
from rlgauntlet.common.stopping import install
from rlgauntlet.errors import UserError


def finite_number(value: Optional[float]) -> Optional[float]:
    """Every number option is finite: a NaN passes a range check (comparisons with NaN are
    false) and would become a silently wrong number. Given to every float option as its callback."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value!r} is not a finite number")
    return value


app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Put trained deep-RL agents through the gauntlet.\n\nExample: rlgauntlet evaluate --agent zoo:cartpole-ppo --env CartPole-v1 --threat gaussian_noise:std=0.1",
)


zoo_app = typer.Typer(no_args_is_help=True, help="Reference agents trained by this project.")
app.add_typer(zoo_app, name="zoo")
ood_app = typer.Typer(no_args_is_help=True, help="Out-of-distribution detection benchmark (shift grids, AUROC).")
app.add_typer(ood_app, name="ood")
published_app = typer.Typer(no_args_is_help=True, help="The field's published robust agents (SA-PPO, ATLA, PA-ATLA, WocaR-PPO releases).")
app.add_typer(published_app, name="published")

console = Console(stderr=True)
# Piped output (logs, CI) gets a wide table rather than one cropped to 80 columns.
out_console = Console() if sys.stdout.isatty() else Console(width=160)


DEFAULT_STORE_NAME = "rlgauntlet-results.sqlite"


def fmt(value: float) -> str:
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"


def print_table(report: dict) -> None:
    agent = report["agent"].get("name") or report["agent"].get("path", "")
    spaces = sorted({ev["budget_space"] for ev in report["evaluations"]})
    table = Table(title=f"{agent} on {report['env']['id']}; budgets and ℓ∞/ℓ2 in {'/'.join(spaces)} units, "
                        f"{report['evaluations'][0]['episodes']} episodes")
    evals = report["evaluations"]
    with_impact = any(ev.get("impact") is not None or ev.get("generalized_impact") is not None for ev in evals)
    with_ssim = any(ev.get("ssim_mean") is not None for ev in evals)
    table.add_column("threat", overflow="fold", min_width=22)
    columns = ["return", "±sem"] + (["impact"] if with_impact else []) + ["perturbed", "Δaction", "ℓ∞", "ℓ2"]
    with_lpips = any(ev.get("lpips_mean") is not None for ev in evals)
    columns += (["SSIM", "PSNR"] if with_ssim else []) + (["LPIPS"] if with_lpips else []) + ["seconds"]
    for col in columns:
        table.add_column(col, justify="right", no_wrap=True)
    for ev in evals:
        imp = ev.get("impact") if ev.get("impact") is not None else ev.get("generalized_impact")
        row = [ev["spec"], fmt(ev["return_mean"]), fmt(ev["return_sem"])]
        row += ([fmt(imp) if imp is not None else "-"] if with_impact else [])
        row += [f"{ev['perturbed_fraction']:.0%}", f"{ev['action_change_rate']:.0%}", fmt(ev["linf_mean"]), fmt(ev["l2_mean"])]
        if with_ssim:
            row += [fmt(ev["ssim_mean"]) if ev.get("ssim_mean") is not None else "-",
                    fmt(ev["psnr_mean"]) if ev.get("psnr_mean") is not None else "-"]
        if with_lpips:
            row += [fmt(ev["lpips_mean"]) if ev.get("lpips_mean") is not None else "-"]
        table.add_row(*row, f"{ev['wall_seconds']:.1f}")
    if report.get("score_min") is not None:
        table.caption = f"impact = (clean − threat) / (clean − argmin agent {report['score_min']:.4g})"
    elif report.get("min_score_fixed") is not None:
        table.caption = f"impact: generalized, minimum score {report['min_score_fixed']:.4g}"
    out_console.print(table)


def print_report(report: dict) -> None:
    """An evaluation report: its table, then one line per strongest-of row."""
    print_table(report)
    for row in report.get("strongest_of", []):
        budget = "" if row["eps"] is None else f" at eps {row['eps']:g}"
        console.print(f"strongest of {len(row['attacks'])}{budget}: {row['return_mean']:.4g} ± {row['return_sem']:.2g} "
                      f"by {row['winner']}")


# -- agent options, shared by every command that loads an agent (one definition each) ------------
PRESET = typer.Option(None, help="override the env preset: atari, classic, mujoco, dm_control, none. Example: --preset none")
KIND = typer.Option(None, help="TorchScript output kind: q, categorical, gaussian, deterministic. Example: --kind q")
def agent_help(example: str, what: str = "") -> str:
    """The help of an ``--agent`` option: ``what`` it is, the accepted forms (the grammar's one
    list) and an example."""
    from rlgauntlet.victims.agent_ref import AGENT_FORMS

    return f"{what}{AGENT_FORMS}. Example: --agent {example}"


VECNORMALIZE = typer.Option(None, help="SB3 VecNormalize statistics saved with the agent (.pkl, read as data); needed where a vecnormalize.pkl lies beside the agent (none: evaluate without it). Example: --vecnormalize vecnormalize.pkl")
INPUT_SPACE = typer.Option(None, help="unit of the network input for TorchScript agents: pixel01, normalized, raw. Example: --input-space raw")
PRECISION = typer.Option("auto", help="network precision: auto (float64 for vector inputs, float32 for images), float32, float64. Example: --precision float32")
DEVICE = typer.Option("cpu", help="torch device: cpu or cuda. Example: --device cuda")
ALLOW_PICKLE = typer.Option(False, "--allow-pickle", help="unpickle the SB3 agent file as SB3 does: runs code stored in it, so only for files you trust (needed for custom policy classes or activation functions). Example: --allow-pickle")
OTHER_ENV = typer.Option(False, "--other-env", help="run an agent whose file names its task (a pg: or published: release) on another task whose spaces fit; refused otherwise. Example: --other-env")
THREADS = typer.Option(None, min=1, help="torch CPU threads for the networks (default $RLGAUNTLET_THREADS or 1: safe on a busy machine; 2 may speed up image agents on an idle one). Example: --threads 2")


def agent_spec(agent: str, preset: Optional[str] = None, kind: Optional[str] = None,
               vecnormalize: Optional[Path] = None, input_space: Optional[str] = None, precision: str = "auto",
               device: str = "cpu", allow_pickle: bool = False, other_env: bool = False):
    """The one agent description the library's jobs take, from the shared agent options: every
    command hands its agent over this way."""
    from rlgauntlet.experiments.agents import as_agent_spec

    return as_agent_spec(agent, preset=preset, kind=kind, vecnormalize=vecnormalize, input_space=input_space,
                         precision=precision, device=device, allow_pickle=allow_pickle, other_env=other_env)


def write_result(out: Optional[Path], data: dict, store_path: Path, kind: str) -> None:
    if out is not None:
        write_json(out, data, kind=kind)
        console.print(f"wrote {out} (episodes stored in {store_path})")


def raise_on_signals() -> None:
    """Make SIGINT and SIGTERM raise :class:`Interrupted` in the main thread, so that a long command
    stops where it is, keeps what it stored and says so (exit 128 + the signal's number).

    Installed even where SIGINT arrives ignored: a command started in the background by a shell
    (``cmd &``, ``nohup``) inherits SIGINT ignored, and Python then gives it no KeyboardInterrupt,
    so ``kill -INT`` would do nothing and ``kill -TERM`` would end it without a word.

    A training stops at its next rollout's end and saves there first (:mod:`rlgauntlet.common.stopping`);
    this says so on stderr, and a second signal stops at once.
    """
    import signal

    def announce(signum: int) -> None:
        print(f"rlgauntlet: {signal.Signals(signum).name}: the training saves at the end of this rollout and "
              "stops (send it again to stop at once, losing the steps since its last checkpoint)",
              file=sys.stderr, flush=True)

    install(announce)


#: what an interrupted command keeps and how to go on, set by the command once it knows
KEPT = {"note": "nothing was written"}


def check_outputs(out: Optional[Path], store: Optional[Path] = None, option: str = "--out", *, kind: str) -> None:
    """Refuse, before any work, an output that cannot be written, is the store, or is a file
    rlgauntlet did not write or wrote as another kind (see ``common.outputs``)."""
    check_output(out, option, protect=[store], kind=kind)


def check_png(out: Optional[Path], store: Optional[Path] = None, option: str = "--out", *, kind: str) -> None:
    """A plot of ``kind``: a .png (kind ``"KIND plot"``), with its numbers going beside it as
    .json (kind ``"KIND numbers"``); both are checked."""
    if out is None:
        return
    if out.suffix.lower() != ".png":
        raise UserError(f"{option} {out}: plots are written as PNG; give a name ending in .png, "
                        f"e.g. {option} {out.with_suffix('.png').as_posix()}")
    check_output(out, option, protect=[store], kind=f"{kind} plot")
    check_output(out.with_suffix(".json"), option, protect=[store], kind=f"{kind} numbers", given=out)
