"""Full size without the weights: shape-only paths build a draft from its headers and config and read no tensor byte.

The drafts are sparse safetensors files written by ``bench/_fullsize.py`` (real headers, holes for the data), the
same writer the full-size drill uses. Bytes read are counted for real: the file's pages are evicted from the page
cache before a command runs and counted with ``mincore`` after it (a read or an mmap touch of a tensor's bytes
brings its pages in).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _paths import ROOT

BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))

from _rss import PEAK_RSS_KB  # noqa: E402
from _fullsize import (  # noqa: E402
    KIMI,
    LLAMA_405B,
    config_only_target,
    data_start,
    evict,
    make_sparse_draft,
    resident_bytes,
)

# a draft of about 300 MB (bf16): as float32 module plus its read state it would pass 1 GB
REDUCED = dict(hidden=2048, vocab=32768, draft_vocab=8000, heads=16, kv_heads=4, head_dim=128, intermediate=5632)
REDUCED_TARGET = {**LLAMA_405B, "hidden_size": 2048, "num_attention_heads": 16,
                  "num_key_value_heads": 4, "intermediate_size": 5632, "vocab_size": 32768, "num_hidden_layers": 61}
# runs the CLI and reports its own peak RSS (VmHWM) on the last stderr line
PEAK_RSS_CHILD = ("import sys\nfrom eagle3lens.cli import main\ncode = main(sys.argv[1:])\n"
                  f"print('peak_rss_kb=' + str({PEAK_RSS_KB}), file=sys.stderr)\nsys.exit(code)")
HEADER_SLACK = 1 << 20  # the header read's readahead may touch the first pages of the data


def data_bytes_read(weights: Path) -> int:
    """Bytes of the tensor data (beyond the header and its readahead) in the page cache now."""
    return resident_bytes(weights, data_start(weights) + HEADER_SLACK)


def test_page_counter_sees_a_tensor_read(tmp_path):
    """The counter is not blind: reading one small tensor of a sparse draft shows up in it."""
    from eagle3lens.checkpoint import Checkpoint

    draft = make_sparse_draft(tmp_path / "draft", **REDUCED)
    weights = draft / "model.safetensors"
    evict(weights)
    ckpt = Checkpoint.open(draft)
    assert data_bytes_read(weights) == 0  # headers only
    ckpt.read("d2t")  # 64 KB in the middle of the file
    assert data_bytes_read(weights) >= 8000 * 8


@pytest.mark.slow
def test_meta_trace_of_a_config_only_target_reads_no_weight(tmp_path):
    draft = make_sparse_draft(tmp_path / "draft", **REDUCED)
    target = config_only_target(tmp_path / "target", REDUCED_TARGET)
    weights = draft / "model.safetensors"
    assert weights.stat().st_size > 250e6 and weights.stat().st_blocks * 512 < 1e6  # few hundred MB, no disk
    evict(weights)
    out = subprocess.run([sys.executable, "-c", PEAK_RSS_CHILD, "trace", "--target", str(target), "--draft",
                          str(draft), "--engine", "vllm==0.33.0", "--device", "meta", "--json"],
                         capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode in (0, 1), out.stderr
    wiring = json.loads(out.stdout)["results"]["wiring"]
    assert wiring["feature"]["shape"][-1] == 3 * 2048 == wiring["fc_in_features"] and wiring["fc_ran"]
    assert wiring["d2t_state"] == "unknown"  # not read on meta
    assert data_bytes_read(weights) == 0  # no tensor byte of the draft was read
    # the draft as a float32 module would alone take over 1 GB (the imports of torch and transformers: about 350 MB)
    peak_kb = int(out.stderr.strip().splitlines()[-1].removeprefix("peak_rss_kb="))
    assert peak_kb < 1 << 20, f"peak RSS {peak_kb / 1024:.0f} MB"


# a parent that holds 1.5 GB and spawns a child, which prints both measures of its own peak RSS
BALLAST_PARENT = f"""
import subprocess, sys
ballast = bytearray(1536 << 20)
ballast[::4096] = b"\\1" * len(ballast[::4096])  # every page touched: resident
child = "import resource\\nprint(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, {PEAK_RSS_KB})"
print(subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True).stdout)
"""


def test_peak_rss_measure_is_the_childs_own():
    """Why the children report VmHWM: a child of a parent holding 1.5 GB reports that 1.5 GB as its ru_maxrss
    (Linux folds the address space it leaves at execve into it), while its VmHWM is its own few MB."""
    out = subprocess.run([sys.executable, "-c", BALLAST_PARENT], capture_output=True, text=True, check=True)
    ru_maxrss_kb, vmhwm_kb = map(int, out.stdout.split())
    assert ru_maxrss_kb > 1536 << 10  # the parent's
    assert vmhwm_kb < 100 << 10  # a bare interpreter's


def test_meta_draft_is_built_from_headers(tmp_path):
    """``load_draft_as(..., device="meta")``: every parameter on meta with the checkpoint's shape, nothing read."""
    from eagle3lens.checkpoint import Checkpoint
    from eagle3lens.draft import canonical_key
    from eagle3lens.probes.wiring import load_draft_as

    draft = make_sparse_draft(tmp_path / "draft", **REDUCED)
    weights = draft / "model.safetensors"
    evict(weights)
    ckpt = Checkpoint.open(draft)
    module = load_draft_as(ckpt, "sglang==0.5.23", device="meta")
    own = dict(module.state_dict())
    assert all(t.device.type == "meta" for t in own.values())
    for key, info in ckpt.tensors.items():
        assert tuple(own[canonical_key(key)].shape) == tuple(info.shape)
    assert data_bytes_read(weights) == 0


@pytest.mark.slow
def test_meta_trace_405b_target_full_size_draft(tmp_path, capsys):
    """The incident's repro: a 405B Llama config and a full Kimi-K2.5-width draft: it completes, reads no weight
    and reports the 3 x 16384 = 49152-wide feature the target hands a 21504-wide fc."""
    from eagle3lens.cli import main

    draft = make_sparse_draft(tmp_path / "draft", **KIMI)
    target = config_only_target(tmp_path / "target", LLAMA_405B)
    weights = draft / "model.safetensors"
    evict(weights)
    code = main(["trace", "--target", str(target), "--draft", str(draft), "--engine", "sglang==0.5.23",
                 "--device", "meta", "--json"])
    captured = capsys.readouterr()
    assert code == 1, captured.err  # findings: the widths do not fit
    wiring = json.loads(captured.out)["results"]["wiring"]
    assert wiring["num_target_layers"] == 126
    assert wiring["feature"]["shape"][-1] == 3 * 16384 == 49152
    assert wiring["fc_in_features"] == 3 * 7168
    assert "trace/aux-width-mismatch" in [f["code"] for f in wiring["findings"]]
    assert data_bytes_read(weights) == 0


# -- the drill (bench/fullsize.py) at reduced width, in process, under the same commands --------------------------
DRILL = dict(hidden=256, vocab=4096, draft_vocab=1000, heads=4, kv_heads=2, head_dim=64, intermediate=512)
DRILL_MLA = dict(mla_heads=4, q_lora_rank=64, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16)


@pytest.mark.parametrize("argv", [["acceptance", "{draft}", "--data", "{data}", "--target", "{target}"],
                                  ["provenance", "--data", "{data}", "--target", "{target}"]])
def test_commands_that_run_the_target_say_where_to_run_it(argv, tmp_path, capsys):
    """A target directory with only config.json (Kimi-K2.5's, as it ships): acceptance and provenance run its weights,
    so they stop with one line that says to run where the target lives and points to --host."""
    from _fullsize import KIMI_K25

    from eagle3lens.cli import main

    target = config_only_target(tmp_path / "kimi-k2.5", KIMI_K25)
    draft = make_sparse_draft(tmp_path / "draft", **DRILL)
    (tmp_path / "hs").mkdir()
    code = main([a.format(draft=draft, data=tmp_path / "hs", target=target) for a in argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "holds only config.json" in err and "where the target lives" in err and "--host" in err


@pytest.mark.slow
def test_fullsize_drill_at_reduced_width(tmp_path):
    """Every command of the drill on each layout (speculators, EAGLE, MLA) and the Kimi-K2.5 / 405B configs: each
    exits as it should, the shape-only paths (info, keys, trace --device meta, wiring) read no tensor byte, and the
    vocabulary paths read no decoder weight."""
    from fullsize import drill

    lines = drill(tmp_path, DRILL, DRILL_MLA, measure=False)
    assert [(line.command, line.why) for line in lines if not line.ok] == []
    by_name = {line.command: line for line in lines}
    for layout in ("speculators", "eagle", "mla"):
        for name in (f"info {layout}", f"trace --device meta {layout} (Kimi-K2.5)", f"wiring {layout} (Kimi-K2.5)"):
            assert by_name[name].run.read and not set().union(*by_name[name].run.read.values()), name
    assert "weights speculators (streaming)" in by_name and "convert --in-place --to sglang==0.5.23" in by_name
    assert (tmp_path / "converted.orig").is_dir()  # --in-place kept the original


def test_a_wrapper_transformers_cannot_build_is_traced_through_its_text_config(tmp_path):
    """Kimi-K2.5 ships KimiK25ForConditionalGeneration (remote code): on meta its DeepSeek-V3 text model is built."""
    from _fullsize import KIMI_K25
    from transformers import AutoConfig

    from eagle3lens.probes.wiring import build_on_meta, find_decoder_layers

    text = {**KIMI_K25["text_config"], "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 16,
            "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4, "n_routed_experts": 4,
            "num_experts_per_tok": 2, "q_lora_rank": 16, "kv_lora_rank": 8, "qk_nope_head_dim": 8,
            "qk_rope_head_dim": 8, "v_head_dim": 8, "vocab_size": 512}
    target = config_only_target(tmp_path / "kimi", {**KIMI_K25, "text_config": text})
    model = build_on_meta(AutoConfig.from_pretrained(target))
    assert type(model).__name__ == "DeepseekV3ForCausalLM"
    assert len(find_decoder_layers(model)[1]) == 4 and all(p.device.type == "meta" for p in model.parameters())
