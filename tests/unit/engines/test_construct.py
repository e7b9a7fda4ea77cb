"""engines.construct: the config rope rule is transformers' own.

From the keys residue of issue 23 (was tests/test_keys_residue.py)."""

from __future__ import annotations

import ast

import pytest
from _builders import draft_tensors, llama_fields, write


ROPES = [{"rope_type": "yarn", "original_max_position_embeddings": 64}, {"type": "yarn"}, {"rope_type": "linear"},
         {"rope_type": "llama3", "factor": 8.0}, {"rope_type": "yarn", "factor": 4.0}, {"rope_type": "default"},
         {"rope_type": "linear", "factor": 2.0}, None]


@pytest.mark.parametrize("model_type", ["llama", "deepseek_v3"])
@pytest.mark.parametrize("rope", ROPES, ids=str)
def test_config_rope_rule_matches_the_installed_transformers(tmp_path, model_type, rope):
    """The rule is transformers' own: AutoConfig raises KeyError for this config.json exactly when it says so."""
    import transformers

    from eagle3lens.engines.construct import config_rope_error

    config = {**llama_fields(), "model_type": model_type, **({"rope_scaling": rope} if rope else {})}
    write(tmp_path / "d", draft_tensors(), config)
    try:
        transformers.AutoConfig.from_pretrained(str(tmp_path / "d"))
        raised = None
    except KeyError as e:
        raised = str(e)
    predicted = config_rope_error(config)
    assert (predicted is None) == (raised is None), (predicted, raised)
    if raised:  # the same message; transformers prints the missing keys as a set (in hash order), we sort them
        head, keys = raised.strip('"').rsplit(": ", 1)
        assert head in predicted and ast.literal_eval(keys) == ast.literal_eval(
            predicted.split(head + ": ", 1)[1].split('"', 1)[0])
