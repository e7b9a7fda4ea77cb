"""A miniature engine package that tests write: a sglang 0.5.11 whose EAGLE-3 draft class loads, renames, skips, logs
and raises like SGLang's, parallel state that refuses to work without torch.distributed, and a compiled extension
that cannot load here (``keys --execute --engine-root DIR`` runs it)."""

from __future__ import annotations

import textwrap
from pathlib import Path

DRAFT = '''
import logging
import torch
from torch import nn
import sgl_kernel                      # a compiled extension: stood in
from sgl_kernel import fused_rmsnorm    # noqa: F401
from sglang.srt.distributed.parallel_state import get_tensor_model_parallel_world_size

logger = logging.getLogger(__name__)


def default_weight_loader(param, loaded_weight):
    assert param.size() == loaded_weight.size(), (param.size(), loaded_weight.size())
    param.data.copy_(loaded_weight)


class Stacked(nn.Module):
    def __init__(self, sizes, cols):
        super().__init__()
        self.sizes = sizes
        tp = get_tensor_model_parallel_world_size()
        self.weight = nn.Parameter(torch.empty(sum(sizes.values()) // tp, cols))
        self.weight.weight_loader = self.weight_loader

    def weight_loader(self, param, loaded_weight, shard_id):
        start = 0
        for name, rows in self.sizes.items():
            if name == shard_id:
                break
            start += rows
        param.data.narrow(0, start, self.sizes[shard_id]).copy_(loaded_weight)


class Layer(nn.Module):
    def __init__(self, h, heads, kv, inter):
        super().__init__()
        d = h // heads
        self.self_attn = nn.Module()
        self.self_attn.qkv_proj = Stacked({"q": heads * d, "k": kv * d, "v": kv * d}, 2 * h)
        self.self_attn.o_proj = nn.Linear(heads * d, h, bias=False)
        self.mlp = nn.Module()
        self.mlp.gate_up_proj = Stacked({0: inter, 1: inter}, h)
        self.mlp.down_proj = nn.Linear(inter, h, bias=False)
        for n in ("input_layernorm", "hidden_norm", "post_attention_layernorm"):
            m = nn.Module()
            m.weight = nn.Parameter(torch.ones(h))
            setattr(self, n, m)


class LlamaForCausalLMEagle3(nn.Module):
    def __init__(self, config, quant_config=None, prefix=""):
        super().__init__()
        if config.num_hidden_layers != 1:  # as sglang 0.4.4.post2 to 0.5.11 refuse
            raise ValueError("EAGLE3 currently only supports 1 layer")
        h, v = config.hidden_size, config.vocab_size
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(v, h)
        self.model.fc = nn.Linear(3 * h, h, bias=False)
        self.model.midlayer = Layer(h, config.num_attention_heads, config.num_key_value_heads,
                                    config.intermediate_size)
        self.model.norm = nn.Module()
        self.model.norm.weight = nn.Parameter(torch.ones(h))
        self.lm_head = nn.Linear(h, config.draft_vocab_size, bias=False)
        self.hot_token_id = None

    def load_weights(self, weights):
        params = dict(self.named_parameters())
        stacked = [(".qkv_proj", ".q_proj", "q"), (".qkv_proj", ".k_proj", "k"), (".qkv_proj", ".v_proj", "v"),
                   (".gate_up_proj", ".gate_proj", 0), (".gate_up_proj", ".up_proj", 1)]
        for name, w in weights:
            if "d2t" in name:
                self.hot_token_id = w + torch.arange(w.shape[0])
                continue
            if "t2d" in name:
                continue
            name = name.replace("layers.0.", "midlayer.")       # renames where the simulated 0.5.11 drops
            for pname, wname, shard in stacked:
                if wname not in name:
                    continue
                name = "model." + name.replace(wname, pname)
                param = params[name]                           # KeyError on an unknown stacked key
                param.weight_loader(param, w, shard)
                break
            else:
                pname = name if name in params else "model." + name
                if pname not in params:
                    logger.warning("Parameter %s not found in params_dict", name)
                    continue
                default_weight_loader(params[pname], w)


EntryClass = [LlamaForCausalLMEagle3]
'''

PARALLEL = '''
_TP = None


def get_tp_group():
    assert _TP is not None, "tensor model parallel group is not initialized"
    return _TP


def get_tensor_model_parallel_world_size():
    return get_tp_group().world_size
'''


def write_engine(root: Path, files: dict[str, str] | None = None) -> Path:
    """The miniature sglang 0.5.11 under ``root`` (its package, dist-info and a compiled extension that cannot load);
    ``files`` adds or replaces files (path relative to ``root`` -> text)."""
    base = {
        "sglang/__init__.py": "",
        "sglang/srt/__init__.py": "",
        "sglang/srt/models/__init__.py": "",
        "sglang/srt/models/llama_eagle3.py": DRAFT,
        "sglang/srt/distributed/__init__.py": "",
        "sglang/srt/distributed/parallel_state.py": PARALLEL,
        "sglang-0.5.11.dist-info/METADATA": "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.11\n",
        # what a CUDA build looks like on a machine without the driver
        "sgl_kernel/__init__.py": "raise ImportError('libcuda.so.1: cannot open shared object file')\n",
    }
    for rel, text in {**base, **(files or {})}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    return root
