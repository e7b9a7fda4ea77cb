"""Find installed sglang / vllm by package metadata and hash their loader files, without importing them.

Standard library only: this file also runs by itself on a GPU host (``python3 -c`` over SSH, see
``detect.py``), printing one JSON object. Files are read only if they are regular files under 8 MiB.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from importlib import metadata

MAX_FILE_BYTES = 8 << 20
ENGINES = ("sglang", "vllm")


def sha12(path: str) -> str | None:
    """sha256[:12] of a regular file of bounded size, else None."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
        return None
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read(MAX_FILE_BYTES + 1)).hexdigest()[:12]


def probe(files: dict[str, list[str]], paths: list[str] | None = None) -> dict[str, dict]:
    """{engine: {"version", "location", "files": {relpath: sha12 or None}}} for each engine installed in ``paths``
    (default: this interpreter's sys.path). The first distribution of a name on the path wins, like import."""
    out: dict[str, dict] = {}
    for name in files:
        dist = next(iter(metadata.distributions(name=name, path=paths if paths is not None else sys.path)), None)
        if dist is None:
            continue
        base = str(dist.locate_file(""))
        out[name] = {"version": dist.version, "location": base,
                     "files": {rel: sha12(os.path.join(base, rel)) for rel in files[name]}}
    return out


if __name__ == "__main__":
    print(json.dumps(probe(json.loads(sys.argv[1]), sys.argv[2:] or None)))
