"""Files generated from code and committed (the Grafana dashboards, the Kubernetes manifests): write
them, or with ``--check`` write nothing and exit 1 naming the committed ones that are out of date."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path


def write_or_check(argv: Sequence[str] | None, description: str, folder: Path,
                   files: Callable[[], Mapping[str, str]], command: str) -> int:
    """The ``main`` of a generator script: ``files()`` (name in ``folder`` → content) written, or checked.
    ``command`` is how to run the script again, for the message."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if a committed file differs; write nothing")
    args = parser.parse_args(argv)
    stale = []
    for name, content in files().items():
        path = folder / name
        if path.exists() and path.read_text(encoding="utf-8") == content:
            continue
        stale.append(name)
        if not args.check:
            path.write_text(content, encoding="utf-8")
    if args.check and stale:
        print(f"out of date: {', '.join(stale)} (run {command})", file=sys.stderr)
        return 1
    return 0
