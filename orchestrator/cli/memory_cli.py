"""`distillery memory ...`: look inside the memory banks of a store.

distillery memory list   [--store DIR | --url URL]
distillery memory show   BANK [--collection NAME] [--limit N] [--store DIR | --url URL]
distillery memory export BANK --out DIR [--store DIR | --url URL]

--store (default distillery_runs/qdrant, i.e. <output_dir>/qdrant of the default
output_dir) and --url may come before or after the subcommand.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from urllib.parse import urlsplit

from distillery.redaction import redact
from distillery.workers.memory.store import MemoryStore, collection_name
from distillery.workers.memory_service import method_layouts


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="distillery memory", description=(__doc__ or "").split("\n\n")[0]
    )
    # --store/--url go before or after the subcommand (`memory --store D list` and
    # `memory list --store D`): the subcommands repeat them without a default, so a
    # value given after the subcommand wins and none given keeps the one before it.
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--store", default=argparse.SUPPRESS, help="embedded store folder")
    where.add_argument("--url", default=argparse.SUPPRESS, help="Qdrant server URL")
    parser.add_argument("--store", default="distillery_runs/qdrant", help="embedded store folder")
    parser.add_argument("--url", default=None, help="Qdrant server URL (instead of --store)")
    sub = parser.add_subparsers(dest="command", required=True)
    listing = sub.add_parser(
        "list", parents=[where], help="banks: method, source, benchmark, entry counts"
    )
    listing.add_argument(
        "--root",
        default=None,
        help="the output root whose ledger says where banks came from (default: the "
        "store's parent folder, as <output_dir>/qdrant)",
    )
    show = sub.add_parser("show", parents=[where], help="print a bank's entries")
    show.add_argument("bank", help="bank id (or its first 16 characters)")
    show.add_argument(
        "--collection", "--type", dest="collection", default=None, help="one collection only"
    )
    show.add_argument("--limit", type=int, default=5)
    export = sub.add_parser(
        "export", parents=[where], help="write a bank to Parquet, one file per collection"
    )
    export.add_argument("bank")
    export.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    # A read command reads: it checks where, and never creates a store (an embedded
    # client creates its folder); every failure of the store is one line and rc 2.
    where = _check_url(args.url) if args.url else _check_folder(args.store)
    if where is not None:
        return _refuse(where)
    try:
        store = MemoryStore(path=None if args.url else args.store, url=args.url)
    except Exception as exc:  # a damaged folder, a store another process holds
        return _refuse(f"cannot read the memory store at {_where(args)}: {_reason(exc)}")
    try:
        return _command(args, store)
    except _Refusal as exc:
        return _refuse(str(exc))
    except Exception as exc:  # the store's own failures (a server down, damaged data)
        return _refuse(f"cannot read the memory store at {_where(args)}: {_reason(exc)}")
    finally:
        with contextlib.suppress(Exception):
            store.close()


class _Refusal(Exception):
    """Bad input found while running a command: its message is the line printed."""


def _refuse(message: str) -> int:
    print(f"distillery memory: {' '.join(message.split())}", file=sys.stderr)
    return 2


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text[:300]}"


def _where(args: argparse.Namespace) -> str:
    return f"--url {redact(args.url)}" if args.url else str(args.store)


def _check_folder(store: str) -> str | None:
    path = Path(store)
    if not path.exists():
        return (
            f"no memory store at {path} (a sweep keeps its store in <output_dir>/qdrant): "
            "give the folder with --store or a Qdrant server with --url"
        )
    if not path.is_dir():
        return f"--store {path} is a file, not a folder of an embedded Qdrant store"
    return None


def _check_url(url: str) -> str | None:
    """A malformed URL, or a server that does not answer within seconds."""
    shown = redact(url)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError as exc:
        return f"--url {shown!r} is not a valid URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"--url {shown!r} is not an http(s) URL (e.g. http://localhost:6333)"
    import httpx

    try:
        httpx.get(url.rstrip("/") + "/healthz", timeout=5.0)
    except httpx.HTTPError as exc:
        return f"cannot reach the Qdrant server at --url {shown}: {_reason(exc)}"
    return None


def _command(args: argparse.Namespace, store: MemoryStore) -> int:
    layouts = method_layouts()  # store prefix -> the method's collections, in its order
    banks: dict[str, tuple[str, dict[str, int]]] = {}  # bank16 -> (prefix, counts)
    for name in store.collections():
        prefix, collection, bank = name.rsplit("_", 2)
        banks.setdefault(bank, (prefix, {}))[1][collection] = store.count(name)

    def collections(bank: str) -> list[str]:
        """The bank's collections: its method's (stored or not), then any others."""
        prefix, counts = banks[bank]
        known = [s.name for s in layouts.get(prefix, ())]
        return known + sorted(set(counts) - set(known))

    if args.command == "list":
        if not banks:
            print(f"no memory banks in {store.location}; run a memory method first")
            return 0
        entries = {
            b: " ".join(f"{c}={banks[b][1].get(c, 0)}" for c in collections(b)) for b in banks
        }
        print(format_bank_list(entries, {b: banks[b][0] for b in banks}, _root_of(args)))
        return 0
    bank = args.bank[:16]
    if bank not in banks:
        raise _Refusal(f"no bank {args.bank!r} in {store.location}; see `distillery memory list`")
    prefix, counts = banks[bank]
    if args.command == "show":
        if args.collection and args.collection not in collections(bank):
            raise _Refusal(
                f"bank {bank} has no collection {args.collection!r}; it has: "
                f"{', '.join(collections(bank)) or 'none'}"
            )
        chosen = [args.collection] if args.collection else collections(bank)
        for collection in chosen:
            if not counts.get(collection):  # a bank may lack a collection
                print(f"== {collection}: 0 entries")
                continue
            # The stored dicts: no entry type needed (the method may not be installed).
            payloads = store.load_payloads(collection_name(bank, collection, prefix))
            print(f"== {collection}: {len(payloads)} entries")
            for payload in payloads[: args.limit]:
                entry = payload["entry"]
                if isinstance(entry, str):  # payload version 1
                    entry = json.loads(entry)
                print(json.dumps(entry, indent=2, ensure_ascii=False))
        return 0
    specs = {s.name: s for s in layouts.get(prefix, ())}
    if not specs:
        raise _Refusal(
            f"bank {bank} was written by a memory method with store prefix {prefix!r}, "
            "which is not installed: install it to export its entries"
        )
    try:
        Path(args.out).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _Refusal(f"--out {args.out}: cannot write there ({_reason(exc)})") from None
    for collection in collections(bank):
        if not counts.get(collection) or collection not in specs:
            print(f"no {collection} entries in {bank}: nothing written")
            continue
        try:
            path = store.export_parquet(
                collection_name(bank, collection, prefix),
                specs[collection],
                f"{args.out}/{collection}.parquet",
            )
        except OSError as exc:
            raise _Refusal(f"--out {args.out}: cannot write there ({_reason(exc)})") from None
        print(f"wrote {path}")
    return 0


def _root_of(args: argparse.Namespace) -> str | None:
    """The output root to read banks' origins from: --root, else the embedded store's
    parent folder (a sweep's store is <output_dir>/qdrant), else none."""
    if getattr(args, "root", None):
        return args.root
    if args.url:
        return None
    from pathlib import Path

    parent = Path(args.store).resolve().parent
    return str(parent) if (parent / "stages").is_dir() else None


def format_bank_list(entries: dict[str, str], prefixes: dict[str, str], root: str | None) -> str:
    """One line per bank: its id, method, whose trajectories, benchmark, the stage it was
    built from, and its entry counts per collection."""
    from distillery.orchestrator.state.bank_origins import bank_origins

    origins = {k[:16]: v for k, v in bank_origins(root).items()} if root else {}
    methods = _methods_by_prefix()
    rows = [("bank", "method", "from", "benchmark", "memory tasks", "source stage", "entries")]
    for bank in sorted(entries):
        origin = origins.get(bank)
        method = methods.get(prefixes[bank], prefixes[bank])
        if origin is None:
            rows.append((bank, method, "?", "?", "?", "?", entries[bank]))
        else:
            rows.append(
                (bank, origin.method or method, origin.agent, origin.benchmark, origin.memory_tasks,
                 origin.source or "?", entries[bank])
            )  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = [
        "  ".join(v.ljust(w) for v, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1]
        for r in rows
    ]
    unknown = [b for b in entries if b not in origins]
    if unknown:
        where = f"the ledger under {root}" if root else "no output root (give --root OUTPUT_DIR)"
        lines.append(
            f"? = not found in {where}: {len(unknown)} bank(s) of another output root, "
            "or built before the ledger recorded banks"
        )
    return "\n".join(lines)


def _methods_by_prefix() -> dict[str, str]:
    """store prefix -> memory method name (the kind that writes it)."""
    from distillery.workers.memory.registry import (
        MemoryMethodLoadError,
        known_methods,
        memory_method,
    )

    out: dict[str, str] = {}
    for kind in known_methods():
        try:
            prefix = getattr(memory_method(kind), "store_prefix", None)
        except MemoryMethodLoadError:
            continue
        if prefix:
            out.setdefault(prefix, kind)
    return out
