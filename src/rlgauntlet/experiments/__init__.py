"""Experiments: the job kit (the agent spec and job context in ``agents``, one run in ``runs``,
the SQLite ``store`` and ``store_of``, what an evaluation runs and reports in ``evaluations``:
threat specs, checked threats, the report and its strongest-of rows, impact, certified
evaluations; ``cells``: cells, chunks and running them on an executor, what sweeps and the
gauntlet both plan) and the jobs built on it: evaluate, certify, calibrate, spectrum,
ood_benchmark, attacker_job (``attack-train``), sweep, and the model-based
paper's table protocol (``model_based``, run by ``benchmarks/model_based_tables.py``).

May import: training, engine, threats, bounds, metrics, victims, envs, zoo, common, errors,
version. Imported by: gauntlet, report, cli."""
