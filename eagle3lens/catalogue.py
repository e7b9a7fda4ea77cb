"""Every finding code eagle3lens emits: its owning probe, default severity, causal rank and meaning.

One table, three readers: ``Finding`` refuses a code that is not here, the doctor ranks causes by
``rank``, and the table of docs/finding-codes.md is :func:`markdown_table` (a test keeps them equal).
Codes are ``area/slug`` and stable once released: add codes, never rename one.

Causal rank follows the path a draft token takes (lower = earlier cause): the weights must load
(keys), the target's aux states must reach fc (trace), the decoder must be trained (weights), its
ids must map to the target vocabulary (vocab), the right layers must be captured (aux ids); ignored
flags only lower the rate, and the server log is the symptom, not a cause. Silent causes lead: a
server that logs accept len 1.00 did load the draft, so loud failures (an unrecognised config, a
load that raises) come after the silent ones they would have hidden. Codes sharing a rank keep the
order their probes reported them in.

This module is a leaf: it imports nothing from the package, so ``findings.py`` can validate against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SeverityName = Literal["info", "warning", "critical"]

# the probes that own codes, and the modules (under eagle3lens/) that make up each probe
PROBES: dict[str, tuple[str, ...]] = {
    "keys": ("probes/keys.py", "probes/executed.py"),
    "vocab": ("probes/vocab.py", "probes/vocab_mapping.py", "probes/vocab_diagnosis.py", "probes/vocab_findings.py",
              "probes/vocab_coverage.py"),
    "weights": ("probes/weights.py",),
    # the aux-layer resolver is the wiring check's static half, the launch-based prediction its predictive one
    "wiring": ("probes/wiring.py", "served/aux_layers.py", "probes/prediction.py", "served/draft.py"),
    "trace": ("probes/trace.py",),
    "logs": ("probes/logs.py", "probes/log_findings.py"),
    "doctor": ("doctor.py",),
    "convert": ("convert.py",),
    "detect": ("engines/detect.py",),
    "acceptance": ("probes/acceptance.py", "probes/acceptance_probe.py", "probes/acceptance_findings.py",
                   "probes/acceptance_entry.py", "probes/measured.py"),
    "provenance": ("probes/provenance.py", "probes/chat.py"),
    "budget": ("probes/budget.py",),  # `engines --detect`: the engine actually installed
}


@dataclass(frozen=True)
class Code:
    """One finding code: who emits it, how bad it usually is, where it sits in the doctor's causal order."""

    code: str
    owner: str
    severity: SeverityName
    rank: int
    meaning: str

    def __post_init__(self) -> None:
        area, _, slug = self.code.partition("/")
        if not area or not slug:
            raise ValueError(f"finding code must be 'area/slug', got {self.code!r}")
        if self.owner not in PROBES:
            raise ValueError(f"{self.code}: unknown owner probe {self.owner!r}")
        if self.severity not in ("info", "warning", "critical"):
            raise ValueError(f"{self.code}: unknown severity {self.severity!r}")

    @property
    def area(self) -> str:
        return self.code.split("/", 1)[0]


# in the docs' order (by area); ``rank`` gives the doctor's order, spaced by 10 so a new code can slot in between
CODES: tuple[Code, ...] = (
    Code("keys/dropped", owner="keys", severity="critical", rank=10,
         meaning="a checkpoint tensor the engine silently never loads (critical for decoder, fc, norm, lm_head)"),
    Code("keys/left-at-init", owner="keys", severity="critical", rank=140,
         meaning="an engine parameter no checkpoint tensor writes: it keeps its init"),
    Code("keys/raises", owner="keys", severity="critical", rank=60,
         meaning="the engine refuses to load (its own error message in `evidence`)"),
    Code("keys/shape-mismatch", owner="keys", severity="critical", rank=30,
         meaning="a tensor whose shape the engine's parameter rejects"),
    Code("keys/engine-sweep", owner="doctor", severity="info", rank=240,
         meaning="(doctor without `--engine`) the serving-engine releases whose load simulation drops tensors, raises "
                 "or misreads the draft"),
    Code("config/missing", owner="doctor", severity="critical", rank=40,
         meaning="no config.json beside the weights: no engine can build the draft"),
    Code("config/unrecognized", owner="keys", severity="critical", rank=50,
         meaning="the engine does not recognise the config's architecture / flavour"),
    Code("config/aux-ids-ignored", owner="wiring", severity="critical", rank=160,
         meaning="aux layer ids in a place the engine does not read"),
    Code("config/aux-ids-shifted", owner="wiring", severity="critical", rank=170,
         meaning="aux ids written in one engine's convention, read in the other's (off by one)"),
    Code("config/flag-ignored", owner="keys", severity="critical", rank=190,
         meaning="an option flag (`norm_before_fc`, `norm_before_residual`, ...) the engine does not honour"),
    Code("config/aux-ids-out-of-range", owner="wiring", severity="critical", rank=190,
         meaning="an aux layer id outside the target's layers (captures nothing)"),
    Code("config/aux-ids-duplicate", owner="wiring", severity="warning", rank=190,
         meaning="the same aux layer listed twice"),
    Code("config/aux-ids-unsorted", owner="wiring", severity="info", rank=190,
         meaning="aux ids not in layer order (engines concatenate in layer order, not list order)"),
    Code("vocab/d2t-missing", owner="vocab", severity="critical", rank=130,
         meaning="N < V and no d2t: the engine maps draft id i to target id i"),
    Code("vocab/d2t-double-subtracted", owner="vocab", severity="critical", rank=130,
         meaning="`arange` subtracted from values already offsets"),
    Code("vocab/d2t-absolute-ids", owner="vocab", severity="critical", rank=130,
         meaning="absolute target ids stored instead of offsets"),
    Code("vocab/t2d-inconsistent", owner="vocab", severity="critical", rank=130,
         meaning="d2t and t2d disagree"),
    Code("vocab/identity-default", owner="vocab", severity="critical", rank=130,
         meaning="an untouched default mapping (all-zero d2t, all-ones t2d, arange)"),
    Code("vocab/d2t-invalid", owner="vocab", severity="critical", rank=130,
         meaning="the d2t invariants are broken and no single reading repairs them"),
    Code("vocab/bad-shape", owner="vocab", severity="critical", rank=130,
         meaning="d2t/t2d with the wrong dtype or length (stale against `lm_head` or the config)"),
    Code("vocab/unneeded-mapping", owner="vocab", severity="warning", rank=130,
         meaning="a d2t shipped although N = V (vLLM 0.33.0 has no parameter for it and raises)"),
    Code("convert/forced", owner="convert", severity="warning", rank=230,
         meaning="`convert --force` wrote what the engine will not use as trained (one per forced item; "
                 "not verified for it)"),
    Code("weights/nan", owner="weights", severity="critical", rank=80,
         meaning="non-finite values (NaN)"),
    Code("weights/inf", owner="weights", severity="critical", rank=90,
         meaning="non-finite values (Inf)"),
    Code("weights/all-zero", owner="weights", severity="critical", rank=100,
         meaning="a tensor of zeros"),
    Code("weights/norm-at-init", owner="weights", severity="warning", rank=120,
         meaning="RMSNorm weights exactly 1.0"),
    Code("weights/init-like", owner="weights", severity="critical", rank=110,
         meaning="statistics of an initialiser, not of training (an EAGLE/SpecForge `lm_head` included: they "
                 "train it), or uninitialised memory (\\|x\\| ≥ 1e4)"),
    Code("weights/target-copy-mismatch", owner="weights", severity="critical", rank=150,
         meaning="embed / lm_head differ from the target's rows they should copy"),
    Code("trace/fc-bypassed", owner="wiring", severity="critical", rank=20,
         meaning="target features reached the draft without passing fc"),
    Code("trace/aux-width-mismatch", owner="wiring", severity="critical", rank=70,
         meaning="the aux feature's width differs from fc's in-features"),
    Code("trace/aux-layers-mismatch", owner="wiring", severity="critical", rank=180,
         meaning="the engine captures other target layers than training used"),
    Code("trace/feature-devices", owner="wiring", severity="info", rank=200,
         meaning="the captured aux states sit on several devices and must be gathered before fc"),
    Code("trace/module-raised", owner="trace", severity="warning", rank=200,
         meaning="a traced module raised during the forward (the deepest call that never returned)"),
    Code("trace/output-varies", owner="trace", severity="info", rank=200,
         meaning="a module's output dtype or device changed between calls"),
    Code("trace/dtype-mismatch", owner="wiring", severity="warning", rank=200,
         meaning="target features and draft weights differ in dtype"),
    Code("launch/server-fails", owner="wiring", severity="critical", rank=65,
         meaning="predicted from the launch: the server stops at start (a target class that cannot capture aux "
                 "states, an architecture the release does not serve) or at the first decode; the engine's own "
                 "error in `evidence`"),
    Code("launch/speculation-off", owner="wiring", severity="warning", rank=215,
         meaning="the launch names no speculative algorithm: the draft is never used"),
    Code("keys/d2t-discarded", owner="keys", severity="critical", rank=130,
         meaning="the engine loads d2t and then throws it away (vLLM 0.9.0–0.9.0.1): draft ids are used raw as "
                 "target ids"),
    Code("keys/d2t-unwritten", owner="keys", severity="critical", rank=130,
         meaning="N < V and the checkpoint stores t2d but no d2t: the engine's mapping keeps its init (vLLM "
                 "draft_id_to_target_id all zeros, SGLang hot_token_id unset): draft id i is proposed as target id i"),
    Code("keys/head-vocab-mismatch", owner="keys", severity="critical", rank=135,
         meaning="no lm_head under a reduced draft vocabulary: the engine installs the target's V-row head without a "
                 "shape check (vLLM 0.11.1+) and scores each draft id with another token's logit"),
    Code("engine/unverified-version", owner="keys", severity="warning", rank=240,
         meaning="the release is newer than the newest one read: simulated with the newest group"),
    Code("engine/simulation-disagrees", owner="keys", severity="warning", rank=240,
         meaning="`keys --execute`: the engine's own loader, run on meta tensors, did otherwise than the profile "
                 "simulates (both outcomes in `evidence`)"),
    Code("engine/served-disagrees", owner="acceptance", severity="warning", rank=240,
         meaning="`--measure`: the real engine, serving the draft, counts another accept length than the estimate "
                 "(beyond the measurement's noise), or stops where the estimate serves (or serves where it stops)"),
    Code("engine/sampled-verify-broken", owner="acceptance", severity="critical", rank=235,
         meaning="`--measure` with sampling on an engine build whose verify step samples against garbage (vLLM's "
                 "CPU build, 0.20.0-0.32.0 but 0.30.0: uninitialised per-token temperatures): the measured figure "
                 "and the text served are the build's defect, not the draft's"),
    Code("engine/not-executed", owner="keys", severity="warning", rank=240,
         meaning="`--execute`: the engine's own loader gave no verdict (its process exited, was interrupted, killed "
                 "or timed out, printed terminal control sequences, or the execution harness failed: its stop says "
                 "so, or a known-good draft of the class cannot be built either): the simulated result stands"),
    Code("engine/patched-source", owner="detect", severity="warning", rank=240,
         meaning="an installed engine's loader file matches no released wheel (source checkout or patch)"),
    Code("engine/mixed-release", owner="detect", severity="warning", rank=240,
         meaning="an installed engine's loader file is another release's (copied over the install, a partial "
                 "upgrade): the file's release is simulated"),
    Code("engine/loader-absent", owner="detect", severity="warning", rank=240,
         meaning="a loader file the installed release ships is not where the package imports from (or is not a "
                 "regular file): the installed loader cannot be checked"),
    Code("acceptance/gap", owner="acceptance", severity="critical", rank=215,
         meaning="offline: the draft as the engine serves it accepts less than as trained (every view and per-cause "
                 "toggle in `evidence`; a measurement of the causes above, never ranked as a cause)"),
    Code("acceptance/not-restored", owner="acceptance", severity="critical", rank=215,
         meaning="`convert --data`: offline, the converted draft as the engine serves it still accepts less than "
                 "the draft as trained"),
    Code("acceptance/served-vs-log-mismatch", owner="acceptance", severity="warning", rank=215,
         meaning="the offline as-served estimate disagrees with the accept len the server logged: something outside "
                 "the checkpoint differs (sampling, tree width, a wiring path not modelled)"),
    Code("data/aux-layers-mismatch", owner="provenance", severity="critical", rank=175,
         meaning="the training data's aux states came from other target layers than the engine feeds at serving "
                 "(critical), or than the draft's config ids describe (warning)"),
    Code("data/last-hidden-normed", owner="provenance", severity="warning", rank=195,
         meaning="the dump's last hidden state is after the final norm where its trainer applies the norm itself"),
    Code("data/last-hidden-unnormed", owner="provenance", severity="warning", rank=195,
         meaning="the dump's last hidden state is before the final norm where its trainer feeds the bare lm_head"),
    Code("data/not-from-target", owner="provenance", severity="critical", rank=172,
         meaning="no chunk of the dump matches any layer of the target: data from another model or revision"),
    Code("data/token-ids-out-of-vocab", owner="provenance", severity="critical", rank=172,
         meaning="dump sequences hold token ids outside the target's vocabulary (skipped)"),
    Code("data/loss-mask-empty", owner="provenance", severity="warning", rank=195,
         meaning="dump sequences whose loss mask is all false: nothing in them trains the draft"),
    Code("data/non-finite", owner="provenance", severity="critical", rank=172,
         meaning="dump sequences holding NaN or Inf hidden states (skipped)"),
    Code("data/template-mismatch", owner="provenance", severity="warning", rank=196,
         meaning="the dump's token stream lacks the served chat template's markers (special tokens, role headers, "
                 "generation prompt): the draft trained on text rendered otherwise than the server renders it"),
    Code("budget/template-cost", owner="budget", severity="warning", rank=197,
         meaning="offline, the draft accepts less on the served traffic (rendered with the served chat template) than "
                 "on its training dump, both as trained within the draft vocabulary: the template's price"),
    Code("budget/vocabulary-cost", owner="budget", severity="warning", rank=198,
         meaning="offline, on the served traffic, the draft accepts less checked against the target's whole "
                 "vocabulary (as the server verifies) than within its draft vocabulary: the vocabulary's price"),
    Code("budget/sampling-cost", owner="budget", severity="warning", rank=199,
         meaning="offline, on the served traffic, the draft accepts less under the served sampling (temperature, "
                 "top-k, top-p) than greedily: the sampling's price"),
    Code("logs/zero-acceptance", owner="logs", severity="critical", rank=220,
         meaning="mean accept length ≤ 1.05: proposals are (almost) never right"),
    Code("logs/low-acceptance", owner="logs", severity="warning", rank=220,
         meaning="below what training promises or below break-even"),
    Code("logs/no-acceptance-lines", owner="logs", severity="warning", rank=220,
         meaning="the log has no acceptance lines (wrong file, or speculation off): nothing judged"),
    Code("logs/speculation-slower", owner="logs", severity="warning", rank=220,
         meaning="measured tok/s below the baseline without speculation: a net loss"),
    Code("logs/engine-mismatch", owner="logs", severity="warning", rank=220,
         meaning="`--engine` names another engine or a release that never prints these lines: read by the log's "
                 "own format"),
)

BY_CODE: dict[str, Code] = {c.code: c for c in CODES}
if len(BY_CODE) != len(CODES):  # pragma: no cover - a duplicate row is a programming error
    raise ValueError("a finding code is listed twice in the catalogue")


def lookup(code: str) -> Code:
    """The catalogue entry of ``code``; ValueError naming the code when there is none."""
    try:
        return BY_CODE[code]
    except KeyError:
        raise ValueError(f"unknown finding code {code!r}: add it to eagle3lens/catalogue.py") from None


def rank(code: str) -> int:
    """The doctor's causal rank of ``code`` (lower = earlier cause)."""
    return lookup(code).rank


def owned_by(probe: str) -> frozenset[str]:
    """The codes ``probe`` emits."""
    return frozenset(c.code for c in CODES if c.owner == probe)


def markdown_table() -> str:
    """The finding-code table of docs/finding-codes.md, one row per code in catalogue order."""
    rows = ["| code | probe | severity | meaning |", "|---|---|---|---|"]
    rows += [f"| `{c.code}` | {c.owner} | {c.severity} | {c.meaning} |" for c in CODES]
    return "\n".join(rows) + "\n"
