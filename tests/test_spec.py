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
