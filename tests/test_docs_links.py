"""Every link into a heading of README.md or docs/*.md (``[text](#anchor)`` or ``[text](file.md#anchor)``)
lands on a heading that exists: the reproduction log is long and its index links dozens of dated
sections by anchor, so a heading renamed or a link mistyped would otherwise go unnoticed."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```.*?^```", flags=re.S | re.M)


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, every character but letters, digits,
    ``_``, ``-`` and spaces dropped (``\\w`` keeps letters such as ε), spaces as ``-``.

    Example:
        >>> anchor("The v8 HalfCheetah field, shipped; v6's rows (2026-12-04, nineteenth session)")
        'the-v8-halfcheetah-field-shipped-v6s-rows-2026-12-04-nineteenth-session'
        >>> anchor("LSTM-PPO Ant under v8: a director that first learns at 3 × ε")
        'lstm-ppo-ant-under-v8-a-director-that-first-learns-at-3--ε'
    """
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of ``text``'s headings (outside code fences), a repeated one suffixed -1, -2, ..."""
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", FENCE.sub("", text), flags=re.M):
        slug = anchor(heading.replace("`", ""))
        found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return found


def test_the_anchor_rule_drops_punctuation_and_numbers_repeated_headings():
    assert anchors("# A, b\n## A b\n```\n# not a heading\n```\n") == {"a-b", "a-b-1"}


def test_every_link_into_a_heading_of_our_docs_lands_on_one():
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    known = {f.resolve(): anchors(f.read_text()) for f in files}
    broken = []
    for f in files:
        for target in re.findall(r"\]\(([^)\s]*#[^)\s]+)\)", FENCE.sub("", f.read_text())):
            path, _, fragment = target.partition("#")
            linked = (f.parent / path).resolve() if path else f.resolve()
            if "://" in path or (path and not path.endswith(".md")):
                continue  # a link into a page we do not write (a URL, an HTML report)
            if linked not in known or fragment not in known[linked]:
                broken.append(f"{f.relative_to(ROOT)}: {target}")
    assert not broken, broken
