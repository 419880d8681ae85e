"""SplitLRPPO: the critic learns at its own rate, the rest at the policy's, under one schedule."""

import pytest

from rlgauntlet.training.defences.split_lr import SplitLRPPO


def _model(**kwargs) -> SplitLRPPO:
    return SplitLRPPO("MlpPolicy", "Pendulum-v1", n_steps=64, batch_size=32, n_epochs=1, seed=0,
                      policy_kwargs=dict(net_arch=[8]), **kwargs)


def test_the_critic_and_only_the_critic_is_in_the_second_group_at_its_own_rate():
    model = _model(learning_rate=1e-2, value_learning_rate=1e-3)
    actor, critic = model.policy.optimizer.param_groups
    assert (actor["lr"], critic["lr"]) == pytest.approx((1e-2, 1e-3))
    expected = {id(p) for p in model.policy.mlp_extractor.value_net.parameters()} | {
        id(p) for p in model.policy.value_net.parameters()}
    assert {id(p) for p in critic["params"]} == expected
    everything = [id(p) for p in model.policy.parameters()]
    assert sorted(everything) == sorted(id(p) for g in (actor, critic) for p in g["params"])  # each once
    assert id(model.policy.log_std) in {id(p) for p in actor["params"]}


def test_a_schedule_scales_both_rates_and_keeps_their_ratio_through_training():
    model = _model(learning_rate=lambda remaining: 1e-2 * remaining, value_learning_rate=1e-3)
    model.learn(128)  # two updates; SB3 sets the rates from the schedule before each
    model._current_progress_remaining = 0.5
    model._update_learning_rate(model.policy.optimizer)
    actor, critic = model.policy.optimizer.param_groups
    assert (actor["lr"], critic["lr"]) == pytest.approx((5e-3, 5e-4))


def test_the_official_lr_pa_atla_preset_builds_its_adversary_with_two_rates(tmp_path):
    from rlgauntlet.training.defences import atla
    from rlgauntlet.training.algorithms import algorithm_class

    preset = atla.get_atla_preset("hopper-pa-atla-ppo-advlr")
    adversary = atla._adversary_recipe(preset, atla.agent_recipe(preset))
    assert algorithm_class(adversary.algo) is SplitLRPPO
    # exact: the preset's literals, passed through
    assert adversary.hyperparams["learning_rate"] == 1e-2 and adversary.hyperparams["value_learning_rate"] == 1e-3
    plain = atla._adversary_recipe(atla.get_atla_preset("hopper-pa-atla-ppo"),
                                   atla.agent_recipe(atla.get_atla_preset("hopper-pa-atla-ppo")))
    assert plain.algo == "ppo"  # the seed-0 run's recipe is unchanged


def test_the_official_config_pa_atla_preset_carries_every_official_hopper_setting():
    from rlgauntlet.training.defences import atla
    from rlgauntlet.training.algorithms import algorithm_class
    from rlgauntlet.training.defences.sa_ppo import SAPPO

    preset = atla.get_atla_preset("hopper-pa-atla-ppo-official")
    agent = atla.agent_recipe(preset)
    adversary = atla._adversary_recipe(preset, agent)
    # the official config_hopper_pa_atla_ppo.json: entropy_coeff 0.01, robust_ppo_pgd_steps 2, robust_ppo_reg 0.3,
    # robust_ppo_eps 0.075 ramped over 1831 of 2441 iterations; adversary 1e-2 / 1e-3, clip 0.4, entropy 3e-4
    # exact: these are the preset's literals passed through, nothing is computed from them
    assert algorithm_class(agent.algo) is SAPPO
    hyper = agent.hyperparams
    assert (hyper["ent_coef"], hyper["sa_steps"], hyper["sa_kappa"], hyper["sa_eps"]) == (0.01, 2, 0.3, 0.075)
    assert hyper["ramp_fraction"] == 0.75 and 1831 / 2441 == pytest.approx(0.75, abs=0.005)
    assert algorithm_class(adversary.algo) is SplitLRPPO
    assert {k: adversary.hyperparams[k] for k in ("learning_rate", "value_learning_rate", "clip_range", "ent_coef")} \
        == {"learning_rate": 1e-2, "value_learning_rate": 1e-3, "clip_range": 0.4, "ent_coef": 3e-4}
    # and the seed-0 preset is left as its run was trained (a literal again: exact)
    assert atla.agent_recipe(atla.get_atla_preset("hopper-pa-atla-ppo")).hyperparams["ent_coef"] == 0.0


def test_the_official_configs_sgld_steps_reach_the_regulariser(monkeypatch):
    """An ignored ``sa_steps`` would silently run SA-PPO's 10: the inner loop sees the 2."""
    import torch

    from rlgauntlet.training.defences import atla, sa_ppo

    hyper = atla.agent_recipe(atla.get_atla_preset("hopper-pa-atla-ppo-official")).hyperparams
    settings = {k: hyper[k] for k in ("sa_eps", "sa_kappa", "sa_steps", "ramp_fraction", "ent_coef")}
    model = sa_ppo.SAPPO("MlpPolicy", "Pendulum-v1", n_steps=64, batch_size=32, seed=0, **settings)
    seen = []
    real = sa_ppo.sgld_perturbation
    monkeypatch.setattr(sa_ppo, "sgld_perturbation",
                        lambda victim, x, eps, steps=10, **kw: seen.append(steps) or real(victim, x, eps, steps, **kw))
    model.regulariser(torch.zeros(4, 3), 0.075)
    assert seen == [2] and model.ent_coef == 0.01 and model.ramp_fraction == 0.75  # literals passed through: exact


def test_a_recurrent_policys_critic_lstm_learns_at_the_value_rate_and_its_actor_lstm_at_the_policys():
    """sb3-contrib's recurrent policy keeps a second LSTM for the critic: it belongs to the value
    group (the release trains its value LSTM with its own optimizer at 1e-2); the actor's LSTM, the
    action head and log σ to the policy group. Without the split, one group at the policy's rate."""
    from rlgauntlet.training.defences.sa_recurrent_ppo import SARecurrentPPO

    def recurrent(**kwargs):
        return SARecurrentPPO("MlpLstmPolicy", "Pendulum-v1", n_steps=32, batch_size=32, n_epochs=1, seed=0,
                              sa_kappa=0.0, policy_kwargs=dict(lstm_hidden_size=8, net_arch=dict(pi=[8], vf=[8])),
                              **kwargs)

    model = recurrent(learning_rate=lambda remaining: 1e-3 * remaining, value_learning_rate=1e-2)
    actor, critic = model.policy.optimizer.param_groups
    assert (actor["lr"], critic["lr"]) == pytest.approx((1e-3, 1e-2))
    policy = model.policy
    expected = {id(p) for m in (policy.lstm_critic, policy.mlp_extractor.value_net, policy.value_net)
                for p in m.parameters()}
    assert {id(p) for p in critic["params"]} == expected
    assert {id(p) for p in policy.lstm_actor.parameters()} <= {id(p) for p in actor["params"]}
    assert sorted(id(p) for p in policy.parameters()) == sorted(id(p) for g in (actor, critic) for p in g["params"])
    model.learn(64)
    model._current_progress_remaining = 0.5
    model._update_learning_rate(model.policy.optimizer)
    assert [g["lr"] for g in model.policy.optimizer.param_groups] == pytest.approx([5e-4, 5e-3])
    assert len(recurrent(learning_rate=1e-3).policy.optimizer.param_groups) == 1
    with pytest.raises(ValueError, match="shared_lstm=False"):
        SARecurrentPPO("MlpLstmPolicy", "Pendulum-v1", n_steps=32, batch_size=32, value_learning_rate=1e-2,
                       policy_kwargs=dict(lstm_hidden_size=8, shared_lstm=True, enable_critic_lstm=False))
