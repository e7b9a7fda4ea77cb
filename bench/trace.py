"""Benchmark the tracer.

(a) shape-only hook overhead on a CPU Llama (hidden 1024, 8 layers, 512 tokens): traced / untraced forward,
    target <= 1.05.
(b) meta-device trace of a Llama-3.1-405B-size target plus its EAGLE-3 draft, three ways on the same model:
    eagle3lens's wiring trace, a plain torch meta forward with one bare hook per decoder layer, and nnsight's
    shape-only ``scan`` (optional, never a project dependency: ``pip install nnsight==0.8.*`` into the venv, or
    ``pip install --no-deps --target DIR 'nnsight==0.8.*'`` and ``PYTHONPATH=DIR``; else "unavailable").
    Targets: eagle3lens within 1.2x of the plain-hook run and faster than nnsight; peak RSS within 1.2x.
    Each variant of (b) runs in its own process so peak RSS is its own.

    .venv/bin/python bench/trace.py            # both
    .venv/bin/python bench/trace.py --only b
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _rss import peak_rss_kb  # noqa: E402

PRESET = "llama-3.1-405b"
SEQ = 8


def bench_overhead(repeats: int = 5) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    from eagle3lens.probes.trace import Tracer

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4,
                         intermediate_size=2816, vocab_size=32000)
    model = LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 32000, (1, 512))

    def forward() -> None:
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)

    def traced() -> None:
        with Tracer(model):  # every module, shapes only
            forward()

    forward()
    plain, hooked = [], []
    for _ in range(repeats):  # interleaved, so load changes hit both alike
        for fn, out in ((forward, plain), (traced, hooked)):
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
    with Tracer(model) as tr:
        forward()
    p, h = statistics.median(plain), statistics.median(hooked)
    print(f"(a) CPU Llama hidden 1024 x 8 layers, 512 tokens, {len(tr.records)} hooked calls")
    print(f"    untraced forward {p * 1e3:8.1f} ms   traced {h * 1e3:8.1f} ms   ratio {h / p:.3f} (target <= 1.05)")


def _build():
    from eagle3lens.draft import DraftConfig, Eagle3Draft
    from eagle3lens.probes.meta_trace import PRESETS, build_target, draft_spec

    preset = PRESETS[PRESET]
    target = build_target(preset)
    with torch.device("meta"):
        draft = Eagle3Draft(DraftConfig.from_spec(draft_spec(preset))).to(torch.bfloat16).eval()
    return preset, target, draft


def _mask() -> torch.Tensor:
    return torch.ones(1, 1, SEQ, SEQ, dtype=torch.bool, device="meta").tril()


def child(variant: str) -> dict:
    """One variant of (b), in this process: build, warm up once, time the median of 3 traces."""
    preset, target, draft = _build()
    ids = torch.zeros(1, SEQ, dtype=torch.long, device="meta")
    aux = preset.aux_ids

    if variant == "eagle3lens":
        from eagle3lens.engines import resolve
        from eagle3lens.probes.aux_layers import resolve_aux_layers
        from eagle3lens.probes.meta_trace import draft_spec
        from eagle3lens.probes.wiring import wire

        profile = resolve("vllm==0.33.0")
        res = resolve_aux_layers(draft_spec(preset), preset.layers, profile)

        def run():
            r = wire(target, draft, res, profile, inputs=ids)
            return r.feature.shape[-1]
    elif variant == "plain":
        def run():
            shapes: dict[int, tuple] = {}
            saved: dict[int, torch.Tensor] = {}
            handles = []
            for i, layer in enumerate(target.model.layers):
                def hook(_mod, args, kwargs, i=i):
                    x = args[0] if args else kwargs["hidden_states"]
                    shapes[i] = tuple(x.shape)
                    if i in aux:
                        saved[i] = x
                handles.append(layer.register_forward_pre_hook(hook, with_kwargs=True))
            try:
                with torch.no_grad():
                    target(input_ids=ids, attention_mask=_mask(), use_cache=False)
                    feature = torch.cat([saved[k] for k in aux], -1)
                    draft(ids[:, 1:], feature[:, :-1])
            finally:
                for h in handles:
                    h.remove()
            return feature.shape[-1]
    elif variant == "nnsight":
        try:
            import nnsight
            from nnsight import TransformersModel
        except ImportError as exc:
            return {"variant": variant, "unavailable": f"nnsight not importable ({exc}); pip install 'nnsight==0.8.*'"}
        from tokenizers import Tokenizer, models
        from transformers import PreTrainedTokenizerFast

        tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>")))
        wrapped = TransformersModel(target, task="text-generation", tokenizer=tok, device="meta")

        def run():  # shapes only: scan's fake tensors cannot leave the block, so the draft gets meta ones
            with wrapped.scan(ids, attention_mask=_mask(), use_cache=False):
                shapes = nnsight.save([tuple(wrapped.model.layers[k].input.shape) for k in aux])
            feature = torch.empty(*shapes[0][:-1], sum(s[-1] for s in shapes), dtype=torch.bfloat16, device="meta")
            with torch.no_grad():
                draft(ids[:, 1:], feature[:, :-1])
            return feature.shape[-1]
    else:
        raise SystemExit(f"unknown variant {variant}")
    width = run()
    times = []
    for _ in range(3):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return {"variant": variant, "seconds": statistics.median(times), "fc_in": width,
            "max_rss_mb": peak_rss_kb() / 1024}


def bench_meta() -> None:
    results = {}
    for variant in ("plain", "eagle3lens", "nnsight"):
        out = subprocess.run([sys.executable, __file__, "--child", variant], capture_output=True, text=True)
        if out.returncode != 0:
            results[variant] = {"unavailable": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"}
        else:
            results[variant] = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"(b) meta {PRESET} target (126 layers, hidden 16384) + EAGLE-3 draft, {SEQ} tokens, median of 3")
    base = results["plain"]
    for variant in ("plain", "eagle3lens", "nnsight"):
        r = results[variant]
        if "unavailable" in r:
            print(f"    {variant:<11} unavailable: {r['unavailable']}")
            continue
        ratio = r["seconds"] / base["seconds"]
        rss = r["max_rss_mb"] / base["max_rss_mb"]
        print(f"    {variant:<11} {r['seconds']:7.3f} s  x{ratio:5.2f} vs plain hooks   peak RSS {r['max_rss_mb']:7.0f} MB "
              f"(x{rss:4.2f})   fc in {r['fc_in']}")
    e3l, nns = results["eagle3lens"], results["nnsight"]
    if "seconds" in e3l and "seconds" in nns:
        print(f"    eagle3lens / nnsight scan: {e3l['seconds'] / nns['seconds']:.2f} (target < 1)")
    print("    targets: eagle3lens <= 1.2x plain hooks in time, peak RSS <= 1.2x plain hooks")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=("a", "b"))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return
    torch.set_num_threads(max(torch.get_num_threads(), 1))
    if args.only in (None, "a"):
        bench_overhead()
    if args.only in (None, "b"):
        bench_meta()


if __name__ == "__main__":
    main()
