"""Consistency: keys, wiring, trace, acceptance as served, provenance and the doctor tell one story per draft.

For every demo variant (and the Kimi pair) under one release of each engine family, each probe's view of the
served draft is held against :func:`~eagle3lens.served.serve_draft` and against the others.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from eagle3lens.doctor import diagnose
from eagle3lens.launch import parse_launch
from eagle3lens.probes.acceptance import estimate_acceptance
from eagle3lens.probes.acceptance_result import within_noise
from eagle3lens.probes.keys import simulate_load
from eagle3lens.probes.prediction import predict_wiring
from eagle3lens.probes.provenance import trace_provenance
from eagle3lens.served import serve_draft

ENGINES = ("sglang==0.5.11", "vllm==0.33.0")
LLAMA = ("speculators", "eagle", "mismatched-ids", "broken-d2t-double-subtracted", "broken-d2t-absolute",
         "broken-d2t-missing", "broken-untrained", "broken-lm-head-nan")
PAIRS = [(v, "target") for v in LLAMA] + [("kimi-mla", "kimi-target")]
LAUNCH = {"sglang": "python -m sglang.launch_server --model-path /m/t --speculative-algorithm EAGLE3",
          "vllm": "vllm serve /m/t --speculative-config '{\"method\": \"eagle3\", \"model\": \"/d/d\"}'"}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("variant", "target"), PAIRS)
def test_keys_and_wiring_read_the_served_draft(demo_dir: Path, engine: str, variant: str, target: str) -> None:
    served = serve_draft(demo_dir / variant, engine=engine, target=demo_dir / target)
    keys = simulate_load(demo_dir / variant, engine, num_target_layers=served.target.num_hidden_layers)
    # the served draft holds the walk's facts; the keys probe judges those same facts (and only it judges them)
    assert (keys.fates, keys.params, keys.refused, keys.refused_at) == \
        (served.load.fates, served.load.params, served.load.refused, served.load.refused_at)
    assert served.load.findings == ()
    assert keys.loaded_keys == served.loaded_keys
    raises = next((f for f in keys.findings if f.code == "keys/raises"), None)
    if served.stops is not None and served.stops.stage in ("config", "construct", "load") and served.stops.remedy \
            and "rewritten_to" not in served.stops.details:  # a rewritten config is the class finding's, not keys/raises
        assert raises is not None and served.stops.remedy == raises.fix  # the stop's fix is the keys finding's
    prediction = predict_wiring(demo_dir / variant, target=demo_dir / target, engine=engine,
                                launch=parse_launch(LAUNCH[engine.split("==")[0]]))
    assert prediction.outcome == served.outcome
    if served.stops is None:
        assert prediction.resolution is not None and prediction.resolution.captured == served.captured
    # a server that stops is said by keys too (the class) or by the prediction (the target, the config gate)
    stopped = served.stops is not None
    said = {f.code for f in keys.findings} | {f.code for f in prediction.findings}
    assert not stopped or said & {"config/unrecognized", "launch/server-fails", "keys/raises"}


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("variant", [v for v in LLAMA if v != "broken-d2t-absolute"])  # refused: see below
def test_acceptance_and_provenance_use_the_layers_the_engine_captures(demo_dir: Path, engine: str,
                                                                      variant: str) -> None:
    served = serve_draft(demo_dir / variant, engine=engine, target=demo_dir / "target")
    result = estimate_acceptance(demo_dir / variant, demo_dir / "hidden-states", target=demo_dir / "target",
                                 engine=engine, fixed=False, limit=4)
    assert tuple(result.views["as_served"].setup["layers_hf"]) == served.captured
    provenance = trace_provenance(demo_dir / "hidden-states", demo_dir / "target", draft=demo_dir / variant,
                                  engine=engine, samples=64)
    assert provenance.engine_layers == served.captured


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("variant", ("speculators", "eagle", "mismatched-ids"))
def test_the_doctor_never_blames_zero_acceptance_on_what_costs_nothing(demo_dir: Path, engine: str,
                                                                       variant: str) -> None:
    report = diagnose(demo_dir / variant, engine=engine, target=demo_dir / "target", data=demo_dir / "hidden-states",
                      weights=False)
    acceptance = report.results["acceptance"]
    served, trained = acceptance.accept_len("as_served"), acceptance.accept_len("as_trained")
    causes = report.results["doctor"].causes
    if within_noise(served, trained):
        assert not [c for c in causes if c.explains == "zero acceptance"], (served, trained, causes)
    elif causes:
        assert causes[0].finding.severity.value == "critical"
    provenance = report.results["provenance"]
    assert provenance.engine_layers == serve_draft(demo_dir / variant, engine=engine,
                                                   target=demo_dir / "target").captured


def test_acceptance_refuses_a_d2t_pointing_outside_the_target_vocabulary(demo_dir: Path) -> None:
    from eagle3lens.errors import CheckpointError

    with pytest.raises(CheckpointError, match="outside the target's vocabulary"):
        estimate_acceptance(demo_dir / "broken-d2t-absolute", demo_dir / "hidden-states", target=demo_dir / "target",
                            engine="sglang==0.5.11", fixed=False, limit=1)
