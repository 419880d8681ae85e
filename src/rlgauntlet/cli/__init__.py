"""The ``rlgauntlet`` command line: one module per command group (see ``cli.common`` for what
they share). Every command reports bad input as one line on stderr and exits with status 2;
SIGINT and SIGTERM exit 130 and 143 saying what was kept.

May import every layer below it.
"""

from __future__ import annotations

import sys

import typer

from rlgauntlet.cli.common import KEPT, app, raise_on_signals
from rlgauntlet.common.stopping import Interrupted
# each module registers its commands; the order of these imports is the order of `rlgauntlet --help`
from rlgauntlet.cli import evaluate  # noqa: F401, I001
from rlgauntlet.cli import train  # noqa: F401
from rlgauntlet.cli import analysis  # noqa: F401
from rlgauntlet.cli import sweep  # noqa: F401
from rlgauntlet.cli import gauntlet  # noqa: F401
from rlgauntlet.cli import ood  # noqa: F401
from rlgauntlet.cli import zoo  # noqa: F401
from rlgauntlet.cli import published  # noqa: F401
from rlgauntlet.errors import UserError

__all__ = ["app", "main"]


def main() -> None:
    """Entry point: run the app; user errors are one stderr line and exit status 2; SIGINT and
    SIGTERM exit 130 and 143 saying what was kept and how to resume."""
    import signal

    raise_on_signals()
    try:
        rc = app(standalone_mode=False)
    except UserError as exc:
        print(f"rlgauntlet: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except (Interrupted, KeyboardInterrupt) as exc:
        signum = getattr(exc, "signum", signal.SIGINT)
        name = signal.Signals(signum).name
        print(f"rlgauntlet: interrupted by {name}; {KEPT['note']}", file=sys.stderr)
        sys.exit(128 + signum)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        print(f"rlgauntlet: interrupted; {KEPT['note']}", file=sys.stderr)
        sys.exit(130)
    except typer.TyperException as exc:  # usage errors: bad option value, missing option
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        if not message.strip():  # a group called without a command: its help is printed above
            message = "give a command; they are listed above"
        print(f"rlgauntlet: error: {message} (see --help)", file=sys.stderr)
        sys.exit(2)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
