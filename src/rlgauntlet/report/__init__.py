"""Rendering only: reward-vs-budget curves, the HTML report card (its data, sections, figures
and templates) and the leaderboard page. It reads stores and result dicts; it ranks nothing
(the ranking is :mod:`rlgauntlet.gauntlet.leaderboard`).

May import: experiments (the store, run summaries), metrics, threats, zoo, common, errors, version."""
