"""``eagle3lens engines``: the known engine profiles, their version ranges and the sources they were read from."""

from __future__ import annotations

import argparse

from ..findings import Report
from . import add_output_options, example_epilog, finish


class EnginesTable:
    findings: tuple = ()

    def __init__(self) -> None:
        from ..engines import all_profiles

        self.profiles = all_profiles()

    def to_dict(self) -> dict:
        return {"engines": [{"spec": p.spec, "label": p.label, "kind": p.kind, "source": p.source,
                             "aux_ids_sources": list(p.aux_ids_sources), "aux_id_convention": p.aux_id_convention,
                             "honoured_flags": sorted(p.honoured_flags), "fc_gate": p.fc_gate,
                             "unknown_keys": p.unknown, "missing_d2t": p.missing_d2t} for p in self.profiles]}


def run(args: argparse.Namespace) -> int:
    report = Report(checkpoint={})
    report.add("engines", EnginesTable())
    return finish(report, args)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("engines", help="list engine profiles with version ranges and source files",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog=example_epilog("eagle3lens engines", "eagle3lens engines --json"))
    add_output_options(p)
    p.set_defaults(func=run)
