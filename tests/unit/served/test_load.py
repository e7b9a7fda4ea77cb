"""The load walk (``served.load``) holds facts; the keys probe judges them: one walk, one fix per stop.

Each case is a stop the release's source names (the MLA constructor's rope factor, SGLang's one-layer constructor,
vLLM 0.9.0's strict check): the served draft stops where the keys probe says the load raises, and the stop's remedy
is the ``keys/raises`` finding's fix, computed once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from _builders import N, draft_tensors, llama_fields, mla_config, mla_draft_tensors, sglang_config, write
from eagle3lens.probes.keys import simulate_load
from eagle3lens.served import serve_draft
from eagle3lens.served.load import walk_load

LLAMA = {**llama_fields(), "architectures": ["LlamaForCausalLMEagle3"], "draft_vocab_size": N}


def _mla(tmp: Path) -> Path:
    return write(tmp / "d", mla_draft_tensors(), mla_config())


def _two_layers(tmp: Path) -> Path:
    return write(tmp / "d", draft_tensors("midlayer."), {**sglang_config(), "num_hidden_layers": 2})


def _strict(tmp: Path) -> Path:
    tensors = draft_tensors()
    del tensors["d2t"], tensors["embed_tokens.weight"]
    return write(tmp / "d", tensors, {**LLAMA, "architectures": ["LlamaForCausalLM"]})


@pytest.mark.parametrize(("build", "engine", "stage"), [
    (_mla, "vllm==0.24.0", "construct"),
    (_two_layers, "sglang==0.5.11", "construct"),
    (_strict, "vllm==0.9.0", "load"),
])
def test_the_stop_and_the_keys_finding_share_one_fix(tmp_path: Path, build, engine: str, stage: str) -> None:
    ckpt = build(tmp_path)
    walked, judged = walk_load(ckpt, engine), simulate_load(ckpt, engine)
    assert walked.findings == ()  # facts only
    assert (walked.fates, walked.params, walked.refused, walked.refused_at) == \
        (judged.fates, judged.params, judged.refused, judged.refused_at)
    raises = [f for f in judged.findings if f.code == "keys/raises"]
    assert raises and raises[0].fix
    served = serve_draft(ckpt, engine=engine)
    assert served.stops is not None and served.stops.stage == stage
    assert served.stops.remedy == raises[0].fix


def test_a_walk_needs_an_engine(tmp_path: Path) -> None:
    from eagle3lens.errors import UsageError

    with pytest.raises(UsageError, match="needs an engine"):
        walk_load(_two_layers(tmp_path))
