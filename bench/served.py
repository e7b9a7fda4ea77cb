"""Benchmark: the served-draft derivation, and acceptance as served with the target run again for its layers.

    .venv/bin/python bench/served.py

1. ``serve_draft`` on a full-size (Kimi-K2.5 width) sparse draft with a config-only target, against ``keys``
   (``simulate_load``) on a tiny draft with the demo's sizes, both from headers. Target: <= 1.5x.
2. ``estimate_acceptance`` as served by ``sglang==0.5.11`` on a dump that does not record its layers (the target,
   a small HF Llama, is run again on each sample's tokens to capture the layers the engine feeds), against the same
   call on the same samples in eagle3lens's own format recording exactly those layers (scored from the dump only).
   Target: <= 1.3x. Interleaved, best of three rounds each.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _fullsize import make_sparse_draft  # noqa: E402

from eagle3lens.checkpoint import Checkpoint  # noqa: E402
from eagle3lens.probes.keys import simulate_load  # noqa: E402
from eagle3lens.served import serve_draft  # noqa: E402

TINY = dict(hidden=64, vocab=2048, draft_vocab=512, heads=4, kv_heads=2, head_dim=16, intermediate=128, ids=(2, 5, 7))
H, V, N, L, T, SAMPLES = 128, 2048, 512, 8, 256, 12
ENGINE = "sglang==0.5.11"


def timed(fn, runs: int = 9) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def derivation(root: Path) -> float:
    full = make_sparse_draft(root / "full")
    tiny = make_sparse_draft(root / "tiny", **TINY)
    target = root / "kimi-target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({
        "architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
        "text_config": {"model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61}}))

    def served() -> None:
        serve_draft(Checkpoint.open(full), engine=ENGINE, target=target)

    def keys() -> None:
        simulate_load(Checkpoint.open(tiny), ENGINE)

    served(), keys()
    t_served, t_keys = timed(served), timed(keys)
    ratio = t_served / t_keys
    print(f"serve_draft, full-size sparse draft + Kimi-K2.5 config: {t_served * 1e3:.1f} ms; "
          f"keys on the tiny draft (baseline): {t_keys * 1e3:.1f} ms")
    print(f"ratio served/keys = {ratio:.2f} (target <= 1.5) -> {'PASS' if ratio <= 1.5 else 'FAIL'}")
    return ratio


def build(root: Path) -> tuple[Path, Path, Path, Path]:
    """A small HF Llama target, a random EAGLE-layout draft (SGLang ids [1, 4, 6] = HF [2, 5, 7]) and two dumps of
    the same sequences: speculators format (layers not recorded) and eagle3lens's own (layers recorded)."""
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM

    from eagle3lens.draft import DraftConfig, Eagle3Draft
    from eagle3lens.probes.data import Sample, target_states, write_dump, write_speculators_sample

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(hidden_size=H, intermediate_size=2 * H, num_hidden_layers=L,
                                         num_attention_heads=4, num_key_value_heads=2, vocab_size=V)).eval()
    model.save_pretrained(root / "target")
    cfg = DraftConfig(hidden=H, target_hidden=H, num_aux=3, intermediate=2 * H, heads=4, kv_heads=2, head_dim=32,
                      draft_vocab=N, vocab=V)
    draft = Eagle3Draft(cfg)
    state = {("midlayer." + k[len("layers.0."):] if k.startswith("layers.0.") else k): v.contiguous()
             for k, v in draft.state_dict().items()}
    (root / "draft").mkdir()
    save_file(state, str(root / "draft" / "model.safetensors"))
    (root / "draft" / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H,
        "intermediate_size": 2 * H, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "num_hidden_layers": 1, "vocab_size": V, "draft_vocab_size": N, "rms_norm_eps": 1e-6,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 4, 6], "use_aux_hidden_state": True}}))
    plain, recorded = root / "plain", root / "recorded"
    plain.mkdir()
    samples = []
    for i in range(SAMPLES):
        ids = torch.randint(0, V, (T,))
        feats, pre, _ = target_states(model, ids[None], (2, 5, 7))
        aux = [f[0].float() for f in feats]
        write_speculators_sample(plain / f"hs_{i}.safetensors", ids, aux, pre[0].float())
        samples.append(Sample(ids, torch.cat(aux, -1), pre[0].float(), torch.ones(T, dtype=torch.bool), False,
                              "bench", (2, 5, 7)))
    write_dump(recorded, samples)
    return root / "draft", root / "target", plain, recorded


def recapture(root: Path) -> float:
    from eagle3lens.probes.acceptance import estimate_acceptance

    draft, target, plain, recorded = build(root)

    def run(dump: Path) -> float | None:
        result = estimate_acceptance(draft, dump, target=target, engine=ENGINE, fixed=False)
        return result.accept_len("as_served")

    assert run(plain) is not None and run(recorded) is not None  # warm-up; both score the served view
    t_plain = t_recorded = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        run(plain)
        t1 = time.perf_counter()
        run(recorded)
        t2 = time.perf_counter()
        t_plain, t_recorded = min(t_plain, t1 - t0), min(t_recorded, t2 - t1)
    ratio = t_plain / t_recorded
    print(f"acceptance as served, target run again for hidden_states [2, 5, 7]: {t_plain:.2f} s; scored from a dump "
          f"recording them (baseline): {t_recorded:.2f} s ({SAMPLES} samples of {T} tokens, target {L} layers)")
    print(f"ratio recapture/dump-only = {ratio:.2f} (target <= 1.3) -> {'PASS' if ratio <= 1.3 else 'FAIL'}")
    return ratio


def main() -> None:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        derivation(Path(tmp))
    with tempfile.TemporaryDirectory() as tmp:
        recapture(Path(tmp))


if __name__ == "__main__":
    main()
