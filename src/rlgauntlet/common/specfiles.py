"""YAML spec files (sweeps, boards) read and validated into a pydantic model, every problem one
:class:`~rlgauntlet.errors.UserError` naming the file and the field.

Example:
    >>> from pydantic import BaseModel
    >>> class Spec(BaseModel):
    ...     agents: list[str]
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "s.yaml"
    >>> _ = path.write_text("agents: [zoo:cartpole-dqn]")
    >>> load_yaml_model(path, Spec, "sweep file", "sweeps/zoo.yaml").agents
    ['zoo:cartpole-dqn']
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from rlgauntlet.errors import UserError

M = TypeVar("M", bound=BaseModel)


def load_yaml_model(path: str | Path, model: type[M], what: str, example: str) -> M:
    """Read the YAML file at ``path`` as ``model``; ``what`` names the file in messages (``sweep
    file``) and ``example`` is a path of one to suggest."""
    import yaml

    path = Path(path)
    if not path.is_file():
        state = "is a directory" if path.is_dir() else "does not exist"
        raise UserError(f"{what} {path} {state}; give the path of a YAML {what}, e.g. {example} (see docs/sweeps.md)")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"{what} {path} is not valid YAML{where}: {problem}") from None
    except UnicodeDecodeError:
        raise UserError(f"{what} {path} is not text; give a YAML {what}") from None
    if not isinstance(data, dict):
        raise UserError(f"{what} {path} must be a mapping with at least 'agents:'; see docs/sweeps.md")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        raise UserError(f"{what} {path}: {where}: {err['msg']}{more}") from None
