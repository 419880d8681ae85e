"""``python -m rlgauntlet.cli``."""

from rlgauntlet.cli import main

main()
