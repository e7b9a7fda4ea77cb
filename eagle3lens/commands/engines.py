"""``eagle3lens engines``: the engine version groups, their release ranges and sources; ``--detect`` the installed one."""

from __future__ import annotations

import argparse

from ..engines.listing import EnginesTable  # moved to engines.listing; kept here for one release
from ..findings import Report
from . import add_output_options, example_epilog, finish

SYNTAX = """\
engine specs (--engine E in keys, doctor, trace, convert, logs):
  NAME                 the newest release read (the report says which one it assumed)
  NAME==VERSION        any release by PEP 440: 0.5.11, 0.5.3.post2, 0.5.0rc2, 0.25.0.dev3; before the
                       engine had EAGLE-3 (sglang < 0.4.4.post2, vllm < 0.8.5) is refused; newer than the
                       newest release read is simulated with the newest group (engine/unverified-version)
  NAME==VERSION:PATH   a runtime path the engine can take for EAGLE-3 aux capture:
                         sglang 0.4.9-0.5.10.post1   :cuda-graph (default) | :eager (--disable-cuda-graph)
                         vllm 0.17.0-0.33.0          :v1 | :v2  (VLLM_USE_V2_MODEL_RUNNER; the default is V1
                                                     up to 0.22.1, V2 from 0.23.0 for dense targets and
                                                     from 0.29.0 for every target)
  installed            the engine `engines --detect` finds in this Python environment
"""


def run(args: argparse.Namespace) -> int:
    report = Report(checkpoint={})
    if args.detect or args.host:
        from ..engines.detect import detect, detect_remote

        result = (detect_remote(args.host, python=args.python, ssh_config=args.ssh_config, paths=args.path)
                  if args.host else detect(args.path or None))
        report.add("engines_detect", result)
    else:
        report.add("engines", EnginesTable())
    return finish(report, args)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("engines", help="list engine version groups with release ranges and source files; "
                                       "--detect the installed engine",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description=SYNTAX,
                       epilog=example_epilog("eagle3lens engines", "eagle3lens engines --json",
                                             "eagle3lens engines --detect",
                                             "eagle3lens engines --detect --host gpu1"))
    p.add_argument("--detect", action="store_true",
                   help="find the installed sglang / vllm (package metadata, never imported), hash its loader files "
                        "where the package imports from (an editable install's checkout included) and name the "
                        "matching profile; engine/patched-source when a file matches no release, "
                        "engine/mixed-release when it is another release's (that release is simulated)")
    p.add_argument("--host", metavar="H", help="run --detect on GPU host H over SSH (implies --detect)")
    p.add_argument("--python", default="python3", help="the Python on --host whose packages to inspect")
    p.add_argument("--ssh-config", metavar="FILE", help="ssh config file for --host (default ~/.ssh/config)")
    p.add_argument("--path", action="append", metavar="DIR",
                   help="look in this site-packages directory instead of this interpreter's (repeatable)")
    add_output_options(p)
    p.set_defaults(func=run)
