"""`distillery memory ...`: look inside the memory banks of a store.

distillery memory list   [--store DIR | --url URL]
distillery memory show   BANK [--type wf|st|fn] [--limit N] [--store DIR | --url URL]
distillery memory export BANK --out DIR [--store DIR | --url URL]

--store (default distillery_runs/qdrant, i.e. <output_dir>/qdrant of the default
output_dir) and --url may come before or after the subcommand.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from distillery.workers.memory.amd.records import MEMORY_TYPES
from distillery.workers.memory.store import MemoryStore


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="distillery memory", description=__doc__.split("\n\n")[0])
    # --store/--url go before or after the subcommand (`memory --store D list` and
    # `memory list --store D`): the subcommands repeat them without a default, so a
    # value given after the subcommand wins and none given keeps the one before it.
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--store", default=argparse.SUPPRESS, help="embedded store folder")
    where.add_argument("--url", default=argparse.SUPPRESS, help="Qdrant server URL")
    parser.add_argument("--store", default="distillery_runs/qdrant", help="embedded store folder")
    parser.add_argument("--url", default=None, help="Qdrant server URL (instead of --store)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", parents=[where], help="banks and their entry counts")
    show = sub.add_parser("show", parents=[where], help="print a bank's entries")
    show.add_argument("bank", help="bank id (or its first 16 characters)")
    show.add_argument("--type", choices=MEMORY_TYPES, default=None)
    show.add_argument("--limit", type=int, default=5)
    export = sub.add_parser(
        "export", parents=[where], help="write a bank to Parquet, one file per type"
    )
    export.add_argument("bank")
    export.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    store = MemoryStore(path=None if args.url else args.store, url=args.url)
    try:
        banks = store.list_banks()
        if args.command == "list":
            if not banks:
                print(f"no memory banks in {store.location}; run an AMD method first")
            for bank, counts in sorted(banks.items()):
                print(bank, " ".join(f"{t}={counts.get(t, 0)}" for t in MEMORY_TYPES))
            return 0
        prefix = args.bank[:16]
        if prefix not in banks:
            print(
                f"no bank {args.bank!r} in {store.location}; see `distillery memory list`",
                file=sys.stderr,
            )
            return 2
        if args.command == "show":
            for memory_type in [args.type] if args.type else list(MEMORY_TYPES):
                if not banks[prefix].get(memory_type):  # a bank may lack a type
                    print(f"== {memory_type}: 0 entries")
                    continue
                entries, _ = store.load(prefix, memory_type)
                print(f"== {memory_type}: {len(entries)} entries")
                for entry in entries[: args.limit]:
                    print(json.dumps(asdict(entry), indent=2, ensure_ascii=False))
            return 0
        for memory_type in MEMORY_TYPES:
            if not banks[prefix].get(memory_type):
                print(f"no {memory_type} entries in {prefix}: nothing written")
                continue
            path = store.export_parquet(prefix, memory_type, f"{args.out}/{memory_type}.parquet")
            print(f"wrote {path}")
        return 0
    finally:
        store.close()
