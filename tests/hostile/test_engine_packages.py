"""``--execute`` on miniature engine packages that misbehave: an import (or a load_weights) that raises SystemExit,
calls os._exit, raises KeyboardInterrupt, prints terminal control sequences or never returns. The engine runs in a
child process: each is one engine/not-executed finding naming what the engine did, the simulated result stands,
the exit status is eagle3lens' own (0/1 by --fail-on), and nothing raw reaches the terminal. And a harness failure
(a runtime context not published, a stand-in removed) is engine/not-executed, never the engine's verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _builders import draft_tensors, sglang_config, write
from _mini_engine import DRAFT, write_engine
from eagle3lens.engines.execute_child import TIMEOUT_ENV
from eagle3lens.probes.executed import execute_load
from eagle3lens.engines.standins import forget_modules

MODEL = "sglang/srt/models/llama_eagle3.py"
HANG_LIMIT = 40  # seconds: the limit the hanging engines are run under (the child imports torch first)
LOAD = "    def load_weights(self, weights):\n"
ESCAPES = ('import sys\nprint("\\x1b]0;owned\\x07\\x1b]52;c;ZXZpbA==\\x07\\x1b[2J")\n'
           'sys.stderr.write("\\x1b[31mred\\x1b[0m \\x9b6n\\n")\n')
# what the engine does -> its code, and what the finding says it did
BEHAVIOURS = {
    "exits": ("raise SystemExit(3)\n", "exited with status 3"),
    "os-exit": ("import os\nos._exit(0)\n", "ended its own process with status 0"),
    "interrupt": ("raise KeyboardInterrupt\n", "was interrupted"),
    "escapes": (ESCAPES, "printed 4 terminal control sequences"),
    "hangs": ("import time\nwhile True:\n    time.sleep(60)\n", f"timed out after {HANG_LIMIT} s"),
}


def _engine(root: Path, behaviour: str, where: str) -> Path:
    code = BEHAVIOURS[behaviour][0]
    if where == "import":
        return write_engine(root, {MODEL: code + DRAFT})
    body = "".join(f"        {line}\n" for line in code.splitlines())
    return write_engine(root, {MODEL: DRAFT.replace(LOAD, LOAD + body)})


def _draft(tmp_path: Path) -> Path:
    tensors = {k: v for k, v in draft_tensors("midlayer.").items() if not k.startswith("embed_tokens")}
    return write(tmp_path / "draft", tensors, sglang_config())


def _keys(draft: Path, root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, TIMEOUT_ENV: str(HANG_LIMIT)}
    return subprocess.run([sys.executable, "-m", "eagle3lens", "keys", str(draft), "--engine", "installed",
                           "--execute", "--engine-root", str(root), *extra], capture_output=True, text=True,
                          check=False, timeout=300, env=env, stdin=subprocess.DEVNULL)


@pytest.mark.slow
@pytest.mark.parametrize("behaviour,fail_on,code", [("exits", "critical", 0), ("os-exit", "warning", 1),
                                                    ("interrupt", "critical", 0), ("escapes", "warning", 1),
                                                    pytest.param("hangs", "critical", 0, marks=pytest.mark.slow)])
def test_an_engine_import_that_misbehaves_is_one_not_executed_finding(tmp_path: Path, behaviour: str,
                                                                     fail_on: str, code: int) -> None:
    """At import: the status is eagle3lens' (the simulated draft has no critical finding; the not-executed warning
    fails a --fail-on warning gate), never the engine's; the JSON is whole; no ESC on either stream."""
    root = _engine(tmp_path / "site", behaviour, "import")
    done = _keys(_draft(tmp_path), root, "--json", "--fail-on", fail_on)
    assert done.returncode == code, done.stderr
    assert "\x1b" not in done.stdout + done.stderr and "\x9b" not in done.stdout + done.stderr
    out = json.loads(done.stdout)
    found = [f for f in out["findings"] if f["code"] == "engine/not-executed"]
    assert len(found) == 1 and BEHAVIOURS[behaviour][1] in found[0]["detail"], found
    assert not [f for f in out["findings"] if f["code"] in ("engine/simulation-disagrees", "keys/raises")]
    keys = out["results"]["keys"]
    assert keys["origin"] == "simulated" and keys["execution"]["not_executed"] == found[0]["evidence"]["reason"]
    assert {t["fate"] for t in keys["tensors"]} != {"not-reached"}  # the simulated fates stand


@pytest.mark.slow
@pytest.mark.parametrize("behaviour", [pytest.param(b, marks=[pytest.mark.slow] if b == "hangs" else [])
                                       for b in sorted(BEHAVIOURS)])
def test_a_load_weights_that_misbehaves_is_one_not_executed_finding(tmp_path: Path, behaviour: str) -> None:
    """Inside load_weights (the engine imported and built): the same, and the finding says where it happened."""
    root = _engine(tmp_path / "site", behaviour, "load")
    result = execute_load(_draft(tmp_path), root=root, timeout=HANG_LIMIT if behaviour == "hangs" else None)
    found = [f for f in result.findings if f.code == "engine/not-executed"]
    assert len(found) == 1 and BEHAVIOURS[behaviour][1] in found[0].detail, found
    if behaviour != "escapes":  # the escapes do not stop it: its record came back, and is withheld
        assert "inside load_weights" in found[0].detail
    assert result.origin == "simulated" and "engine/simulation-disagrees" not in {f.code for f in result.findings}
    assert "\x1b" not in json.dumps(result.to_dict(), ensure_ascii=False)


@pytest.mark.slow  # about 20 s or more on an idle 2-core machine (test-fast leaves it out)
def test_the_terminal_report_shows_the_engines_output_escaped_with_v(tmp_path: Path) -> None:
    root = _engine(tmp_path / "site", "escapes", "import")
    draft = _draft(tmp_path)
    quiet, verbose = _keys(draft, root), _keys(draft, root, "-v")
    for done in (quiet, verbose):
        assert done.returncode == 0 and "\x1b" not in done.stdout + done.stderr and "\x9b" not in done.stdout
        assert "engine/not-executed" in done.stdout and not done.stderr
    assert "-v shows them" in quiet.stdout and "engine output:" not in quiet.stdout
    assert "engine output: \\x1b]0;owned\\x07" in verbose.stdout and "-v shows them" not in verbose.stdout


@pytest.mark.slow
def test_a_well_behaved_engines_warnings_stay_off_stderr(tmp_path: Path) -> None:
    """The engine's own warnings (a logger and warnings.warn at import) are in the record and shown with -v, never
    as stray stderr lines; the execution stands."""
    noisy = ('import logging, warnings\nlogging.getLogger("sglang").warning("Only CUDA devices support AWQ")\n'
             'warnings.warn("GGUF is not available")\n')
    root = write_engine(tmp_path / "site", {"sglang/__init__.py": noisy})
    draft = _draft(tmp_path)
    quiet, verbose = _keys(draft, root), _keys(draft, root, "--json")
    assert quiet.returncode == 0 and quiet.stderr == "" and "Only CUDA" not in quiet.stdout
    assert "-v shows them" in quiet.stdout
    keys = json.loads(verbose.stdout)["results"]["keys"]
    assert keys["origin"] == "executed" and verbose.stderr == ""
    record = json.dumps(keys["execution"])  # the logger's line in its logs, the warning in its output
    assert "Only CUDA devices support AWQ" in record and "GGUF is not available" in record


# sglang 0.5.19's constructors read the runtime context the launcher publishes (config_bag): without it they raise
RUNTIME_CONTEXT = '''
_PUBLISHED = {}


def config_bag(namespace):
    if namespace not in _PUBLISHED:
        raise ValueError(f"config namespace {namespace!r} not published")
    return _PUBLISHED[namespace]
'''
READS_CONTEXT = "        super().__init__()\n        from sglang.srt.runtime_context import config_bag\n" \
                "        config_bag('spec')\n"


@pytest.mark.slow
def test_a_runtime_context_the_harness_does_not_publish_is_not_executed(tmp_path: Path) -> None:
    """The class's constructor fails for every draft of the class (the known-good built-in one too): the harness
    failed, not the checkpoint. engine/not-executed, no keys/raises, no engine/simulation-disagrees."""
    model = DRAFT.replace("        super().__init__()\n        if config.num_hidden_layers", READS_CONTEXT
                          + "        if config.num_hidden_layers")
    root = write_engine(tmp_path / "site", {MODEL: model, "sglang/srt/runtime_context.py": RUNTIME_CONTEXT})
    done = _keys(_draft(tmp_path), root, "--json")
    out = json.loads(done.stdout)
    codes = [f["code"] for f in out["findings"]]
    assert done.returncode == 0 and codes.count("engine/not-executed") == 1
    assert "engine/simulation-disagrees" not in codes and "keys/raises" not in codes
    found = next(f for f in out["findings"] if f["code"] == "engine/not-executed")
    assert "built-in specforge draft" in found["detail"] and "not published" in found["detail"]


def test_a_removed_stand_in_is_not_executed_and_a_constructor_refusal_stays_the_verdict(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the world-size-1 parallel group the miniature's Stacked layer asserts in every draft: the harness.
    The 2-layer refusal of the same constructor is the engine's verdict on the checkpoint (the built-in draft
    builds): keys/raises, as before."""
    from eagle3lens.engines import execute_sglang

    root = write_engine(tmp_path / "site")
    two = write(tmp_path / "two", {k: v for k, v in draft_tensors("midlayer.").items()
                                   if not k.startswith("embed_tokens")}, {**sglang_config(), "num_hidden_layers": 2})
    try:
        refused = execute_load(two, root=root, isolate=False)
        assert "keys/raises" in {f.code for f in refused.findings} and refused.origin == "executed"
        monkeypatch.delitem(execute_sglang.SGLANG_STATE, "sglang.srt.distributed.parallel_state")
        forget_modules(("sglang", "sgl_kernel"))
        result = execute_load(_draft(tmp_path), root=root, isolate=False)
    finally:
        forget_modules(("sglang", "sgl_kernel"))
    codes = [f.code for f in result.findings]
    assert codes.count("engine/not-executed") == 1 and "engine/simulation-disagrees" not in codes
    assert "keys/raises" not in codes and result.origin == "simulated"
    assert "not initialized" in result.execution["not_executed"]
