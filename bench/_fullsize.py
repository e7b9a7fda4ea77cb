"""Full-size EAGLE-3 drafts for benchmarks, written as sparse files (headers real, bytes holes or filler).

Kimi-K2.5 numbers from FACTS.md: hidden 7168, V 163840, N 32000, fc 21504 -> 7168, bf16. Head counts and
intermediate size are not in the notes: 56 heads x 128, 8 KV heads, intermediate 18432 are assumed.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

KIMI = dict(hidden=7168, vocab=163840, draft_vocab=32000, n_aux=3, heads=56, kv_heads=8, head_dim=128, intermediate=18432)


def draft_shapes(hidden: int, vocab: int, draft_vocab: int, n_aux: int, heads: int, kv_heads: int, head_dim: int,
                 intermediate: int, with_embed: bool = True) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Speculators-layout tensor table: name -> (dtype, shape)."""
    H, P = hidden, "layers.0."
    t = {
        P + "self_attn.q_proj.weight": ("BF16", (heads * head_dim, 2 * H)),
        P + "self_attn.k_proj.weight": ("BF16", (kv_heads * head_dim, 2 * H)),
        P + "self_attn.v_proj.weight": ("BF16", (kv_heads * head_dim, 2 * H)),
        P + "self_attn.o_proj.weight": ("BF16", (H, heads * head_dim)),
        P + "mlp.gate_proj.weight": ("BF16", (intermediate, H)),
        P + "mlp.up_proj.weight": ("BF16", (intermediate, H)),
        P + "mlp.down_proj.weight": ("BF16", (H, intermediate)),
        P + "input_layernorm.weight": ("BF16", (H,)), P + "hidden_norm.weight": ("BF16", (H,)),
        P + "post_attention_layernorm.weight": ("BF16", (H,)),
        "fc.weight": ("BF16", (H, n_aux * H)), "norm.weight": ("BF16", (H,)),
        "lm_head.weight": ("BF16", (draft_vocab, H)), "d2t": ("I64", (draft_vocab,)), "t2d": ("BOOL", (vocab,)),
    }
    if with_embed:
        t["embed_tokens.weight"] = ("BF16", (vocab, H))
    return t


BYTES = {"BF16": 2, "I64": 8, "BOOL": 1}


def safetensors_prefix(tensors: dict[str, tuple[str, tuple[int, ...]]]) -> tuple[bytes, int]:
    """Length prefix + space-padded JSON header for ``name -> (dtype, shape)`` stored back to back, and the data size."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, (dtype, shape) in tensors.items():
        size = BYTES[dtype]
        for d in shape:
            size *= d
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw, offset


LAYOUTS = ("speculators", "eagle", "mla")
# Kimi-K2.5's MLA sizes (its DeepSeek-V3 text config), used by the MLA drafter class (SGLang kimi_k25_eagle3.py)
KIMI_MLA = dict(mla_heads=64, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                v_head_dim=128)


def layout_shapes(layout: str, hidden: int, vocab: int, draft_vocab: int, n_aux: int, heads: int, kv_heads: int,
                  head_dim: int, intermediate: int, with_embed: bool, mla: dict[str, int] | None = None,
                  ) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The tensor table of a draft in ``layout``: speculators ``layers.0.*``, EAGLE/SpecForge ``midlayer.*``, or the
    MLA class (``layers.0.self_attn.{q_a_proj,kv_a_proj_with_mqa,...}``, SpecForge's Kimi names)."""
    shapes = draft_shapes(hidden, vocab, draft_vocab, n_aux, heads, kv_heads, head_dim, intermediate, with_embed)
    if layout == "speculators":
        return shapes
    if layout == "eagle":
        return {("midlayer." + k.removeprefix("layers.0.")) if k.startswith("layers.0.") else k: v
                for k, v in shapes.items()}
    if layout != "mla":
        raise ValueError(f"unknown layout {layout!r}: one of {', '.join(LAYOUTS)}")
    m = {**KIMI_MLA, **(mla or {})}
    H, P, h = hidden, "layers.0.self_attn.", m["mla_heads"]
    attention = {
        P + "q_a_proj.weight": ("BF16", (m["q_lora_rank"], 2 * H)), P + "q_a_layernorm.weight": ("BF16", (m["q_lora_rank"],)),
        P + "q_b_proj.weight": ("BF16", (h * (m["qk_nope_head_dim"] + m["qk_rope_head_dim"]), m["q_lora_rank"])),
        P + "kv_a_proj_with_mqa.weight": ("BF16", (m["kv_lora_rank"] + m["qk_rope_head_dim"], 2 * H)),
        P + "kv_a_layernorm.weight": ("BF16", (m["kv_lora_rank"],)),
        P + "kv_b_proj.weight": ("BF16", (h * (m["qk_nope_head_dim"] + m["v_head_dim"]), m["kv_lora_rank"])),
        P + "o_proj.weight": ("BF16", (H, h * m["v_head_dim"])),
    }
    return {**attention, **{k: v for k, v in shapes.items() if not k.startswith(P)}}


def _config(layout: str, hidden: int, vocab: int, draft_vocab: int, heads: int, kv_heads: int, head_dim: int,
            intermediate: int, ids: tuple[int, ...], mla: dict[str, int] | None) -> dict:
    layer = {"model_type": "llama", "hidden_size": hidden, "intermediate_size": intermediate, "num_attention_heads": heads,
             "num_key_value_heads": kv_heads, "head_dim": head_dim, "num_hidden_layers": 1, "vocab_size": vocab,
             "rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": False}
    if layout == "speculators":
        return {"architectures": ["Eagle3DraftModel"], "speculators_model_type": "eagle3", "draft_vocab_size": draft_vocab,
                "eagle_aux_hidden_state_layer_ids": list(ids), "norm_before_residual": False, "target_hidden_size": None,
                "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                                       "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                                       "verifier": {"name_or_path": None, "architectures": ["DeepseekV3ForCausalLM"]}},
                "transformer_layer_config": layer}
    sglang_ids = [k - 1 for k in ids]  # SGLang's convention: id k = output of layer k (HF hidden_states[k + 1])
    eagle_config = {"eagle_aux_hidden_state_layer_ids": sglang_ids, "use_aux_hidden_state": True}
    if layout == "eagle":
        return {**layer, "architectures": ["LlamaForCausalLMEagle3"], "draft_vocab_size": draft_vocab,
                "eagle_config": eagle_config}
    m = {**KIMI_MLA, **(mla or {})}
    return {**layer, "model_type": "kimi_k2", "architectures": ["Eagle3DeepseekV2ForCausalLM"],
            "num_attention_heads": m["mla_heads"], "num_key_value_heads": m["mla_heads"],
            "draft_vocab_size": draft_vocab, "q_lora_rank": m["q_lora_rank"], "kv_lora_rank": m["kv_lora_rank"],
            "qk_nope_head_dim": m["qk_nope_head_dim"], "qk_rope_head_dim": m["qk_rope_head_dim"],
            "v_head_dim": m["v_head_dim"], "max_position_embeddings": 4096, "rope_theta": 50000.0,
            "eagle_config": eagle_config}


def make_sparse_draft(dir: str | Path, hidden: int = 7168, vocab: int = 163840, draft_vocab: int = 32000, n_aux: int = 3,
                      heads: int = 56, kv_heads: int = 8, head_dim: int = 128, intermediate: int = 18432,
                      with_embed: bool | None = None, fill: bool | str = False, ids: tuple[int, ...] = (2, 30, 58),
                      layout: str = "speculators", mla: dict[str, int] | None = None) -> Path:
    """Write ``dir/model.safetensors`` + ``config.json`` of a draft in ``layout`` (``ids`` in speculators' convention,
    input of layer k; written shifted for SGLang's ``eagle_config``); ``fill`` writes real bytes, random ones
    (``True``) or weight-like bf16 values, normal(0, 0.02) (``"normal"``), else the data is a hole. ``with_embed`` defaults to the layout's habit (speculators saves it, SpecForge not)."""
    dir = Path(dir)
    dir.mkdir(parents=True, exist_ok=True)
    embed = layout == "speculators" if with_embed is None else with_embed
    shapes = layout_shapes(layout, hidden, vocab, draft_vocab, n_aux, heads, kv_heads, head_dim, intermediate, embed, mla)
    prefix, offset = safetensors_prefix(shapes)
    path = dir / "model.safetensors"
    with open(path, "wb") as fh:
        fh.write(prefix)
        if fill:
            block = weight_like_bytes(16 << 20) if fill == "normal" else os.urandom(16 << 20)
            left = offset
            while left:
                n = min(left, len(block))
                fh.write(block[:n])
                left -= n
        else:
            fh.truncate(len(prefix) + offset)
    config = _config(layout, hidden, vocab, draft_vocab, heads, kv_heads, head_dim, intermediate, ids, mla)
    (dir / "config.json").write_text(json.dumps(config, indent=2))
    return dir


def weight_like_bytes(n: int, std: float = 0.02) -> bytes:
    """``n`` bytes of bf16 values drawn from normal(0, std) (float32 values cut to their top 16 bits)."""
    import numpy as np

    values = np.random.default_rng(0).standard_normal(n // 2, dtype=np.float32) * np.float32(std)
    return (values.view(np.uint32) >> 16).astype(np.uint16).tobytes()


# -- the target's config as it ships, config-only -------------------------------------------------------------
LLAMA_405B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 16384,
              "num_hidden_layers": 126, "num_attention_heads": 128, "num_key_value_heads": 8,
              "intermediate_size": 53248, "vocab_size": 128256, "max_position_embeddings": 131072,
              "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "torch_dtype": "bfloat16", "tie_word_embeddings": False}


# Kimi-K2.5's config.json as it ships: the multimodal wrapper, its DeepSeek-V3 text model in text_config
KIMI_K25 = {
    "architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
    "auto_map": {"AutoConfig": "configuration_kimi_k25.KimiK25Config",
                 "AutoModel": "modeling_kimi_k25.KimiK25ForConditionalGeneration"},
    "text_config": {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "hidden_size": 7168,
        "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 64,
        "num_key_value_heads": 64, "n_routed_experts": 384, "n_shared_experts": 1, "num_experts_per_tok": 8,
        "first_k_dense_replace": 1, "moe_layer_freq": 1, "n_group": 1, "topk_group": 1, "routed_scaling_factor": 2.827,
        "scoring_func": "sigmoid", "topk_method": "noaux_tc", "norm_topk_prob": True, "q_lora_rank": 1536,
        "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "vocab_size": 163840, "max_position_embeddings": 262144, "rms_norm_eps": 1e-5, "rope_theta": 50000.0,
        "rope_scaling": {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096, "beta_fast": 32.0,
                         "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
        "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16"},
    "vision_config": {"model_type": "moonvit", "hidden_size": 1152, "num_hidden_layers": 27, "patch_size": 14},
    "torch_dtype": "bfloat16", "tie_word_embeddings": False,
}


def config_only_target(dir: str | Path, config: dict) -> Path:
    """A model directory holding only ``config.json`` (a target nobody downloaded)."""
    dir = Path(dir)
    dir.mkdir(parents=True, exist_ok=True)
    (dir / "config.json").write_text(json.dumps(config, indent=2))
    return dir


# -- counting the bytes a command read: the file's pages in the page cache ------------------------------------
PAGE = os.sysconf("SC_PAGE_SIZE")


def evict(path: str | Path) -> None:
    """Drop ``path``'s pages from the page cache (written pages are flushed first), so that any later read of its
    bytes, by ``read`` or through an ``mmap``, shows up in :func:`resident_bytes`."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def resident_bytes(path: str | Path, start: int = 0, end: int | None = None) -> int:
    """Bytes of ``path[start:end]`` held in the page cache now (``mincore`` over a fresh read-only mapping, which
    itself faults nothing in): after :func:`evict`, the bytes some process has read since."""
    import ctypes
    import mmap

    size = os.path.getsize(path)
    end = size if end is None else min(end, size)
    if end <= start:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    first = start // PAGE * PAGE
    length = end - first
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, first)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap {path}")
        try:
            pages = (length + PAGE - 1) // PAGE
            vec = ctypes.create_string_buffer(pages)
            if libc.mincore(ctypes.c_void_p(addr), length, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore {path}")
            return sum(b & 1 for b in vec.raw) * PAGE
        finally:
            libc.munmap(ctypes.c_void_p(addr), length)
    finally:
        os.close(fd)


def data_start(path: str | Path) -> int:
    """Where a safetensors file's tensor data begins (after its length prefix and header)."""
    with open(path, "rb") as fh:
        return 8 + struct.unpack("<Q", fh.read(8))[0]


def tensors_read(path: str | Path, slack: int = 1 << 20) -> set[str]:
    """Names of the tensors of a safetensors file with bytes in the page cache (after :func:`evict`: those some
    process read), ignoring the first ``slack`` bytes of data that the header read's readahead may touch."""
    with open(path, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        header = json.loads(fh.read(n))
    start = 8 + n
    found = set()
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = (start + o for o in entry["data_offsets"])
        begin = max(begin, start + slack)
        if end > begin and resident_bytes(path, begin, end):
            found.add(name)
    return found
