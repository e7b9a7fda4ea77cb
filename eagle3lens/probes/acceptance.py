"""Offline acceptance: what a draft accepts as trained, as an engine loads and wires it, and after the fix.

    result = estimate_acceptance("demo/speculators", "demo/hidden-states", target="demo/target",
                                 engine="sglang==0.5.11")
    result.views["as_served"].accept_len, result.views["as_trained"].accept_len, result.toggles

Views (each over the same samples, ``steps`` = K draft steps):

- ``metrics``: speculators 0.9.0's EAGLE-3 validation metrics, restated (``models/eagle3/data.py::shift_batch``,
  ``models/eagle3/core.py`` TTT loop, ``models/eagle3/metrics.py::align_for_step``,
  ``models/metrics.py::compute_accuracy_single_step``): position i sees token i+1 and the aux state of i; step k
  is fed the ground-truth tokens shifted k to the left (teacher forcing) and step k-1's hidden output, attends
  to step 0's keys causally and to its own earlier steps' keys at the same position only; the teacher is the
  argmax of the verifier's lm_head rows of the draft vocab over the verifier's final norm of the last hidden
  state. ``full_acc_k`` counts positions where steps 0..k were all right over the loss-masked positions of step
  k; ``cond_acc_k`` the same count over the positions whose earlier steps were right. Counts are summed over
  samples, as speculators' validation sums them over batches.
- ``as_trained`` / ``as_served`` / ``fixed``: greedy chain drafting as engines run it at decode time (topk 1):
  step 0 reads the target's aux states through fc, each further step its own predicted token (mapped to target
  ids with d2t) and its own hidden output, with the same attention pattern as above; step k at a start is
  accepted when it and every earlier step equal the target's greedy tokens. ``full_acc`` is then the
  per-position acceptance rate, ``cond_acc`` the rate given every earlier position was accepted, and the
  expected accept length per verify step is ``1 + sum(full_acc)`` (the bonus token included).
  ``as_served`` loads only what the engine loads (``keys.simulate_load``; every parameter it never writes holds
  the engine's init, ``torch.empty`` memory modelled as noise or zeros: ``engine_init``), shares embed / lm_head
  from the target where the engine does, reads d2t as the engine does, captures the layers the engine captures
  (aux-layer resolver, in its convention) and applies its fc gate; ``scenario="aux-off"`` feeds the target's
  single final (post-norm) hidden state instead, and on SGLang (whose route there is ``--speculative-algorithm
  EAGLE``) also installs the target's embed and head as that worker does (``EngineProfile.eagle_mode_vocab``).
  ``fixed`` is ``as_served`` on the checkpoint ``convert --to E`` writes, with aux capture on: the caller makes it
  (``fixed=eagle3lens.convert.fixed_draft`` converts into a temporary folder; the probe converts nothing).

The verified tokens are the target's greedy tokens on the data's own prefix; where the data leaves the
target's greedy path, a later step is checked against a prefix the server would not have seen
(``greedy_agreement`` says how often the data follows it; live capture continues prompts greedily, so it is 1).

The probe and its result assembly live here; the setups in :mod:`.acceptance_setup`, the samples in
:mod:`.acceptance_samples`, scoring in :mod:`.acceptance_score`, findings in :mod:`.acceptance_findings`, the
other callers' entry points in :mod:`.acceptance_entry`, the engines' log lines in :mod:`.acceptance_log_lines`.
"""

from __future__ import annotations

# the public names of the acceptance probe, wherever each job lives (other code and tests import them from here)
from ..draft import QUERY_CHUNK, ttt_attention  # moved to eagle3lens.draft; kept for one release
from ..progress import Progress
from ..target_runtime import (  # moved to eagle3lens.target_runtime; kept for one release
    TEACHER_CHUNK,
    ZERO_CENTERED_NORM,
    Teacher,
    norm_offset,
)
from .acceptance_entry import (
    check_data,
    doctor_acceptance,
    held_against_log,
    live_samples,
    needed_layers,
    verify_conversion,
)
from .acceptance_findings import GAP_ABS, GAP_REL, ZERO_ACCEPT_LEN, gap_findings, log_comparison, restored
from .acceptance_probe import DEFAULT_STEPS, estimate_acceptance
from .acceptance_score import chain
from .acceptance_setup import FixedDraft, Fixer, Setup
from .acceptance_log_lines import log_lines

__all__ = [
    "DEFAULT_STEPS", "GAP_ABS", "GAP_REL", "QUERY_CHUNK", "TEACHER_CHUNK", "ZERO_ACCEPT_LEN", "ZERO_CENTERED_NORM",
    "FixedDraft", "Fixer", "Progress", "Setup", "Teacher", "chain", "check_data", "doctor_acceptance",
    "estimate_acceptance", "gap_findings", "held_against_log", "live_samples", "log_comparison", "log_lines",
    "needed_layers", "norm_offset", "restored", "ttt_attention", "verify_conversion",
]
