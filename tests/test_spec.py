import pytest

from rlgauntlet.errors import UserError
from rlgauntlet.threats import parse_threat
from rlgauntlet.threats.spec import parse_params


@pytest.mark.parametrize(
    "text, expected",
    [
        ("eps=1/255", {"eps": 1 / 255}),
        ("std=0.1,p=0.5", {"std": 0.1, "p": 0.5}),
        ("steps=30,norm=linf,random_start=true", {"steps": 30, "norm": "linf", "random_start": True}),
        ("eps=1e-3", {"eps": 1e-3}),
        ("alpha=-2", {"alpha": -2}),
        ("", {}),
    ],
)
def test_parse_params_documented_forms(text, expected):
    assert parse_params(text) == expected


def test_parse_threat_builds_threat_with_schedule():
    t = parse_threat("uniform_noise:eps=2/255,p=0.25")
    assert t.name == "uniform_noise"
    assert t.params.eps == pytest.approx(2 / 255)
    assert t.schedule.p == 0.25
    assert t.spec == "uniform_noise:eps=2/255,p=0.25"
    assert parse_threat("gaussian_noise:std=0.1").schedule.p == 1.0


@pytest.mark.parametrize(
    "spec, message",
    [
        ("", "empty threat spec"),
        ("gausian_noise:std=0.1", "unknown threat 'gausian_noise' (did you mean 'gaussian_noise'?)"),
        ("uniform_noise:std=0.1", "threat 'uniform_noise' has no parameter 'std'; its parameters are: eps, p"),
        ("uniform_noise:eps", "'eps' is not key=value"),
        ("uniform_noise:eps=", "'eps=' is not key=value"),
        ("uniform_noise:eps=1/0", "divides by zero"),
        ("uniform_noise:eps=a/3", "eps: Input should be a valid number"),
        ("uniform_noise:eps=-0.1", "eps: Input should be greater than or equal to 0"),
        ("uniform_noise:eps=0.1,eps=0.2", "'eps' is given twice"),
        ("uniform_noise:eps=0.1,p=1.5", "p=1.5 must be a probability in [0, 1]"),
        ("gaussian_noise", "give exactly one of std= or severity=1..5"),
        ("gaussian_noise:std=big", "std: Input should be a valid number"),
    ],
)
def test_bad_specs_are_rejected_with_documented_message(spec, message):
    with pytest.raises(UserError) as exc:
        parse_threat(spec)
    assert message in str(exc.value)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("attacker=runs/paad-hopper/attacker.zip", {"attacker": "runs/paad-hopper/attacker.zip"}),
        ("attacker=../a/b.zip,eps=0.075", {"attacker": "../a/b.zip", "eps": 0.075}),
        ("attacker=runs/1/2", {"attacker": "runs/1/2"}),  # two slashes: a path, not a fraction
        ("target=height|head_height", {"target": ["height", "head_height"]}),
        ("target=height|0|-1/2", {"target": ["height", 0, -0.5]}),
        ("label=\"a,b=c\"", {"label": "a,b=c"}),
        ("label='x|y/z',eps=1/255", {"label": "x|y/z", "eps": 1 / 255}),
        ("label=\"say \\\"hi\\\"\"", {"label": 'say "hi"'}),
        ("pair=\"a,b\"|c", {"pair": ["a,b", "c"]}),
        ("word=true_ish", {"word": "true_ish"}),
    ],
)
def test_spec_values_paths_lists_and_quotes(text, expected):
    assert parse_params(text) == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("label=\"a,b", "the value of 'label' opens a \" quote that is never closed"),
        ("target=a||b", "target=a||b has an empty list item"),
        ("target=a|", "has an empty list item"),
        ("label=ab\"c\"d", "label=ab\"c\"d has a stray quote"),
        ("eps=3/0", "eps=3/0 divides by zero"),
    ],
)
def test_malformed_values_name_their_key(text, message):
    with pytest.raises(UserError) as exc:
        parse_params(text)
    assert message in str(exc.value)


def test_text_where_a_number_is_expected_names_the_key():
    with pytest.raises(UserError, match="scale=runs/x': scale: Input should be a valid number"):
        parse_threat("physics:param=length,scale=runs/x")


def test_cli_rejects_a_malformed_value_with_exit_2(tmp_path, cli_main):
    res = cli_main(["evaluate", "--agent", "zoo:cartpole-ppo", "--env", "CartPole-v1", "--threat",
                    "obs_delay:steps=\"2"], cwd=tmp_path)
    assert res.returncode == 2 and "the value of 'steps' opens a" in res.stderr and "Traceback" not in res.stderr


def test_every_threat_that_loads_a_file_keys_it_by_name():
    """A parameter naming a file or folder is in the threat's ``file_params``, so a results store keys
    its runs by the file's name and content, not its place (a new learned attack that forgets to
    declare it would make a moved store run its episodes again)."""
    from rlgauntlet.threats.base import THREATS

    loads = {name: sorted(k for k, f in cls.Params.model_fields.items()
                          if any(w in (f.description or "") for w in ("file", "folder")))
             for name, cls in THREATS.items()}
    declared = {name: sorted(cls.file_params) for name, cls in THREATS.items()}
    assert {n: k for n, k in loads.items() if k} == {n: k for n, k in declared.items() if k}
    assert loads["paad"] == ["attacker"] and loads["released_attacker"] == ["path"]


@pytest.mark.parametrize("spec, expected", [
    ("paad:attacker=runs/paad,eps=0.075", "paad:attacker=paad,eps=0.075"),
    ("paad: attacker = ../elsewhere/runs/paad/ , eps=0.075,transfer=true", "paad:attacker=paad,eps=0.075,transfer=true"),
    ('robust_sarsa:q="a,b/q:1",eps=0.05', 'robust_sarsa:q="q:1",eps=0.05'),
    ("pgd:eps=0.1,steps=10", "pgd:eps=0.1,steps=10"),
])
def test_key_spec_keeps_a_files_name_and_every_other_item(spec, expected):
    from rlgauntlet.threats.spec import key_spec

    assert key_spec(parse_threat(spec)) == expected
