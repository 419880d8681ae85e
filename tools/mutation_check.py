"""Mutation check: which single-line changes of a module do the tests not notice?

Each mutant changes one token on one line (an operator flipped, a comparison loosened, a
constant moved, min/max or argmin/argmax swapped, sum/mean swapped, a sign dropped), runs the
given tests with that change in place, and restores the file. A mutant the tests pass is a
"survivor": a wrong implementation the suite would let through. The score is the fraction
caught. The module file is always restored, also on Ctrl-C or SIGTERM.

Run: python tools/mutation_check.py src/rlgauntlet/threats/attacks/momentum.py \
         --tests tests/test_known_answers.py tests/test_attacks.py [--max 30] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import signal
import subprocess
import sys
import tokenize
from io import StringIO
from pathlib import Path

#: (pattern, replacement) swaps tried on code lines (not comments or docstrings)
SWAPS = [
    (r" \+ ", " - "), (r" - ", " + "), (r" \* ", " / "), (r" / ", " * "), (r" < ", " <= "), (r" > ", " >= "),
    (r" <= ", " < "), (r" >= ", " > "), (r" == ", " != "), (r"\bmin\(", "max("), (r"\bmax\(", "min("),
    (r"\.min\(", ".max("), (r"\.max\(", ".min("), (r"argmax", "argmin"), (r"argmin", "argmax"),
    (r"\.sum\(", ".mean("), (r"\.mean\(", ".sum("), (r"\bTrue\b", "False"), (r"\bFalse\b", "True"),
    (r"(?<![\w.])([1-9]\d*)(?![\w.])", lambda m: str(int(m.group(1)) + 1)), (r"\.sign\(\)", ""),
    (r"\bamax\b", "amin"), (r"torch\.maximum", "torch.minimum"), (r"torch\.minimum", "torch.maximum"),
]


def code_lines(text: str) -> list[int]:
    """Indices of lines that are code (outside docstrings, not comments or imports)."""
    out, in_doc = [], False
    for i, line in enumerate(text.splitlines()):
        stripped = line.strip()
        quotes = stripped.count('"""')
        if in_doc:
            in_doc = quotes % 2 == 0
            continue
        if stripped.startswith('"""'):
            in_doc = quotes == 1
            continue
        if stripped and not stripped.startswith(("#", "import ", "from ", "@", "def ", "class ")):
            out.append(i)
    return out


def string_spans(text: str) -> dict[int, list[tuple[int, int]]]:
    """Column spans of string literals per line index (messages and help text are not behaviour)."""
    spans: dict[int, list[tuple[int, int]]] = {}
    for tok in tokenize.generate_tokens(StringIO(text).readline):
        if tok.type != tokenize.STRING:
            continue
        (row0, col0), (row1, col1) = tok.start, tok.end
        for row in range(row0, row1 + 1):
            start = col0 if row == row0 else 0
            end = col1 if row == row1 else 10**9
            spans.setdefault(row - 1, []).append((start, end))
    return spans


def mutants(text: str) -> list[tuple[int, str, str]]:
    """Single-token changes on code lines; changes inside string literals are left out."""
    lines = text.splitlines()
    strings = string_spans(text)
    found = []
    for i in code_lines(text):
        for pattern, repl in SWAPS:
            for m in re.finditer(pattern, lines[i]):
                if any(a <= m.start() < b for a, b in strings.get(i, [])):
                    continue
                new = lines[i][:m.start()] + (repl(m) if callable(repl) else repl) + lines[i][m.end():]
                if new != lines[i]:
                    found.append((i, lines[i].strip(), new.strip()))
    return [(i, old, new) for i, old, new in found]


def apply(text: str, line: int, old: str, new: str) -> str:
    lines = text.splitlines(keepends=True)
    lines[line] = lines[line].replace(old, new, 1)
    return "".join(lines)


def _tests_fail(tests: list[str], timeout: int) -> bool:
    try:
        res = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-W", "ignore",
                              *tests], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return True  # a mutant that hangs the tests is noticed
    return res.returncode != 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("module", type=Path)
    parser.add_argument("--tests", nargs="+", required=True)
    parser.add_argument("--max", type=int, default=30, help="mutants tried (a random sample when there are more)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=int, default=600)
    parser.add_argument("--out", type=Path, default=None, help="JSON written (default benchmarks/results/mutation_MODULE.json)")
    args = parser.parse_args()
    original = args.module.read_text()
    # a SIGTERM (a killed job, a closed terminal) unwinds like Ctrl-C, so `finally` restores the module
    signal.signal(signal.SIGTERM, lambda signum, frame: (_ for _ in ()).throw(KeyboardInterrupt()))
    if _tests_fail(args.tests, args.timeout):
        sys.exit("the tests fail without any mutation (or cannot run with this Python); fix that first, "
                 "or every mutant would count as caught")
    candidates = mutants(original)
    random.Random(args.seed).shuffle(candidates)
    results = []
    try:
        for line, old, new in candidates[: args.max]:
            args.module.write_text(apply(original, line, old, new))
            caught = _tests_fail(args.tests, args.timeout)
            results.append({"line": line + 1, "from": old, "to": new, "caught": caught})
            print(f"{'caught  ' if caught else 'SURVIVED'} line {line + 1}: {new}", flush=True)
    finally:
        args.module.write_text(original)
    caught = sum(r["caught"] for r in results)
    summary = {"module": str(args.module), "tests": args.tests, "mutants": len(results), "caught": caught,
               "score": round(caught / len(results), 3) if results else None, "results": results}
    print(json.dumps({k: v for k, v in summary.items() if k != "results"}))
    out = args.out or Path("benchmarks/results") / f"mutation_{args.module.stem}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
