"""The third audit's one-line bugs, re-applied: each must make its known-answer test in
tests/test_audit_v3.py fail (docs/testing.md, hardening v3). Each file is restored after its run.

Run from the repository root, in a worktree of its own (it edits modules in place while it runs):
    python tools/audit_v3_mutants.py          # all
    python tools/audit_v3_mutants.py 3 7      # by index
"""
import subprocess
import sys
M = [
 ("src/rlgauntlet/gauntlet/summary.py", "np.std(values, ddof=1)", "np.std(values, ddof=0)", "test_a_worst_case_rows"),
 ("src/rlgauntlet/gauntlet/summary.py", "-seed{plan.seeds[0]}-", "-", "test_the_certification_and_checks"),
 ("src/rlgauntlet/gauntlet/checks.py", "v.std(unbiased=True) / math.sqrt(n)", "v.std(unbiased=True) / n", "test_the_checks_standard_error"),
 ("src/rlgauntlet/gauntlet/checks.py", "return mean < -Z * sem and mean < -1e-9", "return mean < Z * sem and mean < -1e-9", "test_worse_than_random"),
 ("src/rlgauntlet/metrics/aggregates.py", "point = float(iqm(np.concatenate(strata)))", "point = float(np.mean(np.concatenate(strata)))", "test_iqm_interval_point"),
 ("src/rlgauntlet/gauntlet/leaderboard.py", "headline = protocol.headline_of(meta.get(\"version\")) if protocol else None", "headline = protocol.headline_eps if protocol else None", "test_the_leaderboard_scores_no_unknown"),
 ("src/rlgauntlet/metrics/ood.py", 'np.searchsorted(tprs, tpr, side="left")', 'np.searchsorted(tprs, tpr, side="right")', "test_fpr_at_95"),
 ("src/rlgauntlet/threats/attacks/push.py", '(f",steps={steps}" if steps != 1 else "")', '""', "test_a_pgd_push"),
 ("src/rlgauntlet/training/radial.py", "radial_ppo_policy_loss(terms, lower, upper, self.kappa)", "radial_ppo_policy_loss(terms, upper, lower, self.kappa)", "test_radial_ppo_training_passes"),
 ("src/rlgauntlet/training/radial.py", "return kappa * terms.surrogate(terms.log_prob) + (1 - kappa) * worst_loss", "return (1 - kappa) * terms.surrogate(terms.log_prob) + kappa * worst_loss", "test_radial_ppo_weights"),
 ("src/rlgauntlet/training/radial.py", "next_actions = self.q_net(data.next_observations)", "next_actions = self.q_net_target(data.next_observations)", "test_radial_dqn_training_step"),
 ("src/rlgauntlet/training/sa_dqn.py", "q_clean=q_all).mean()", "q_clean=q_all).sum()", "test_sa_dqn_training_step"),
 ("src/rlgauntlet/training/atla.py", "(min(1.0, agent_steps / ramp) if", "(agent_steps / ramp if", "test_the_atla_adversarys_budget"),
 ("src/rlgauntlet/training/atla.py", "games.obs_rms = agent_env.obs_rms", "pass", "test_atla_clean_games"),
 ("src/rlgauntlet/envs/presets.py", 'wrapper_class=MinAtarImage,\n                            env_kwargs={"max_episode_steps": MAX_EPISODE_STEPS}, **vec)', 'wrapper_class=MinAtarImage, **vec)', "test_minatar_training_envs"),
 ("src/rlgauntlet/common/outputs.py", "return isinstance(mark, str) and (mark == GENERATOR or mark.startswith(GENERATOR + \" \"))", "return isinstance(data, dict) and \"generator\" in data", "test_a_foreign_json"),
 ("src/rlgauntlet/common/outputs.py", 'return f"{PNG_KEY}\\x00{GENERATOR}".encode() in head', 'return True', "test_a_real_png"),
 ("src/rlgauntlet/training/checkpoints.py", 'buffer.pos, buffer.full = int(saved["pos"]), bool(saved["full"])', 'buffer.pos, buffer.full = int(saved["pos"]), False', "test_a_wrapped_replay_buffer or test_a_resumed_sac"),
 ("src/rlgauntlet/training/checkpoints.py", "            if value is not None:\n                getattr", "            if value is None:\n                getattr", "test_a_resumed_sac"),
 ("src/rlgauntlet/experiments/agents.py", "changed = {k: v for k, v in given.items() if v != AgentSpec.model_fields[k].default}", "changed = given", "test_a_library_functions_default"),
]
only = sys.argv[1:]
caught = 0
for i,(path, old, new, test) in enumerate(M):
    if only and str(i) not in only: continue
    src = open(path).read()
    if src.count(old) != 1:
        print(i, "PATTERN COUNT", src.count(old), path, old); continue
    open(path, "w").write(src.replace(old, new))
    try:
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:randomly", "tests/test_audit_v3.py", "-k", test], capture_output=True, text=True)
        last = r.stdout.strip().splitlines()[-1]
        caught += r.returncode == 1
        print(i, "CAUGHT" if r.returncode == 1 else f"SURVIVED rc={r.returncode}", path.split("/")[-1], "|", last, flush=True)
    finally:
        open(path, "w").write(src)
print(f"{caught} of {len(M) if not only else len(only)} caught")
sys.exit(0 if caught == (len(M) if not only else len(only)) else 1)
