"""User-facing errors.

Every problem caused by the user's input (a missing file, an agent that does not fit the
env, an unknown threat) is raised as :class:`UserError`. The CLI prints its message as one
line on stderr and exits with status 2, without a traceback. The message names the problem
*and* the fix.
"""


class UserError(Exception):
    """Bad input from the user; the message says what is wrong and how to fix it."""
