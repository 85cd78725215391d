"""`memory-agent keys`: create, list and revoke API keys (the chat API, MCP over HTTP).

    memory-agent keys create --user dana [--label laptop]   # prints the key once
    memory-agent keys list [--user dana]
    memory-agent keys revoke <prefix>

Only a hash of each key is stored (storage/api_keys.py); the prefix shown by ``list``
names a key without revealing it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from core.cli_arguments import label_arg
from app.cli.terminal_text import shown
from core.namespaces import user_id_arg
from storage import api_keys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memory-agent keys", description="API keys of the chat API and of MCP over HTTP.")
    sub = parser.add_subparsers(dest="action", required=True)
    create = sub.add_parser("create", help="create a key for a user and print it (the only time it is shown)")
    create.add_argument("--user", type=user_id_arg, required=True, help="the user the key authenticates as")
    create.add_argument("--label", type=lambda v: label_arg(v) if v.strip() else "", default=None, help="a note to recognise the key by")
    listing = sub.add_parser("list", help="list keys (prefix, user, label, dates); never the keys themselves")
    listing.add_argument("--user", type=user_id_arg, help="only this user's keys")
    revoke = sub.add_parser("revoke", help="revoke a key by its prefix")
    revoke.add_argument("prefix")
    return parser


def _when(value) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value else "-"


async def _run(args: argparse.Namespace) -> int:
    from storage.postgres import database_url, open_pool, prepare_database

    url = database_url()
    await prepare_database(url)
    pool = await open_pool(url, max_size=2)
    try:
        await api_keys.setup(pool)
        if args.action == "create":
            try:
                key = await api_keys.create_key(pool, args.user, args.label or "")
            except ValueError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            print(key)
            print(f"Key for user {args.user!r} created; it is shown only now. Send it as `Authorization: Bearer <key>`.", file=sys.stderr)
            return 0
        if args.action == "list":
            keys = await api_keys.list_keys(pool, args.user)
            if not keys:
                print("No API keys." if not args.user else f"No API keys for user {args.user!r}.")
                return 0
            print(f"{'PREFIX':<10} {'USER':<20} {'CREATED':<16} {'LAST USED':<16} {'REVOKED':<16} LABEL")
            for k in keys:
                print(f"{k.prefix:<10} {k.user_id:<20} {_when(k.created_at):<16} {_when(k.last_used_at):<16} {_when(k.revoked_at):<16} {shown(k.label)}")
            return 0
        named = api_keys.key_prefix(args.prefix)  # said back as its prefix: a whole key given is a secret
        if await api_keys.revoke_key(pool, args.prefix):
            print(f"Revoked key {named}.")
            return 0
        print(f"error: no active key with prefix {named!r} (see `memory-agent keys list`).", file=sys.stderr)
        return 1
    finally:
        await pool.close()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return asyncio.run(_run(args))


if __name__ == "__main__":
    sys.exit(main())
