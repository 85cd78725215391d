"""The `memory-agent` command."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from pathlib import Path

from core.errors import MemoryAgentError
from app.cli.terminal_text import shown
from core.cli_arguments import label_arg, path_arg
from core.namespaces import thread_id_arg, user_id_arg
from memory.kinds import STORE_KINDS


def _default_user() -> str:
    return os.environ.get("MEMORY_AGENT_USER") or "local"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memory-agent", description="A chat agent whose memory lives in Postgres.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the agent does")
    parser.add_argument("--version", action="version", version=f"memory-agent {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    chat = sub.add_parser("chat", help="chat (interactive on a terminal; one message per line from a pipe)")
    chat.add_argument("--user", type=user_id_arg, default=_default_user(), help="whose memory to use (default: $MEMORY_AGENT_USER or 'local')")
    group = chat.add_mutually_exclusive_group()
    group.add_argument("--chat", dest="chat_id", type=thread_id_arg, help="continue this chat (thread id)")
    group.add_argument("--new", action="store_true", help="start a new chat (default: continue the latest)")
    chat.add_argument("--model", help="chat model for this session (default: $MEMORY_AGENT_MODEL or auto)")

    mem = sub.add_parser("memory", help="inspect what the agent remembers")
    mem_sub = mem.add_subparsers(dest="memory_command", required=True)
    show = mem_sub.add_parser("show", help="profile, preferences, facts, tasks and chats of a user")
    show.add_argument("--user", type=user_id_arg, default=_default_user())
    show.add_argument("--json", action="store_true", help="print JSON")
    show.add_argument("--all", action="store_true", help="include superseded facts")
    drop = mem_sub.add_parser("delete-invalid", help="delete a stored item that does not validate (listed by `memory show`)")
    drop.add_argument("--user", type=user_id_arg, default=_default_user())
    drop.add_argument("kind", choices=[k.name for k in STORE_KINDS])
    drop.add_argument("key", help="the item's key, as `memory show` lists it")

    sub.add_parser("doctor", help="check the database, pgvector, model and embeddings")

    ingest = sub.add_parser("ingest", help="add documents (.md .txt .html .pdf, or folders) to the knowledge base")
    ingest.add_argument("paths", nargs="+", type=path_arg)
    ingest.add_argument("--collection", default="default", type=label_arg)
    ingest.add_argument(
        "--follow-symlinks",
        action="store_true",
        help="also ingest what symbolic links inside the given folders point to outside them (skipped by default)",
    )
    ingest.add_argument(
        "--remove",
        action="store_true",
        help="remove the documents named (as ingest named them, or by their files' paths) from the collection instead",
    )

    imp = sub.add_parser("import", help="import chat histories (ours: roles, texts, times; LoCoMo's; a ChatGPT or Claude conversations.json) as new chats")
    imp.add_argument("file", type=path_arg, help="the history, as docs/import.md describes ('-' reads stdin)")
    imp.add_argument("--user", type=user_id_arg, default=_default_user(), help="whose chat it becomes (default: $MEMORY_AGENT_USER or 'local')")
    imp.add_argument("--title", type=label_arg, help="the chat's title (default: the file's, else generated)")
    imp.add_argument("--model", help="chat model for the memory updates (default: $MEMORY_AGENT_MODEL or auto)")
    imp.add_argument("--resume", metavar="CHAT_ID", type=thread_id_arg, help="go on with this chat's incomplete import (the same file)")

    reindex = sub.add_parser("reindex", help="re-embed all memory and knowledge with the configured embeddings")
    reindex.add_argument(
        "--episodes", action="store_true", help="only rebuild the index of what was said (every message) from the chats"
    )
    migrate = sub.add_parser(
        "migrate",
        help="move the database to the current layout (also done at start-up; idempotent, nothing is lost), and the "
        "embedded Postgres' data to a new major version (a copy of the old one is kept)",
    )
    migrate.add_argument(
        "--old-postgres-bin",
        metavar="DIR",
        type=Path,
        help="the bin folder (or the pgserver wheel) of the Postgres that wrote the embedded data, when it cannot be "
        "downloaded (default: pgserver 0.1.4 from PyPI, cached)",
    )
    for name, (_, help_text) in MODULE_COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    parser.commands = dict(sub.choices)  # for per-command usage on a bad option
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("memory-agent")
    except PackageNotFoundError:  # run from a checkout that was not installed
        return "(not installed)"


def _command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost parser of the command given, so a bad option shows that command's usage."""
    command = parser.commands.get(getattr(args, "command", None) or "", parser)
    inner = getattr(args, "memory_command", None)
    if inner and command._subparsers is not None:
        for action in command._subparsers._group_actions:
            command = action.choices.get(inner, command)
    return command


# Commands that live in their own modules, imported only when used (keeps `chat` fast to start).
# Each module has `build_parser() -> argparse.ArgumentParser` and `main(argv) -> int`.
MODULE_COMMANDS = {
    "serve": ("app.http.serve", "serve the chat API and web page (FastAPI/uvicorn)"),
    "studio": ("app.studio.launcher", "open LangGraph Studio on our Postgres (langgraph dev)"),
    "mcp": ("app.mcp.server", "serve the memory tools over MCP (stdio or streamable HTTP)"),
    "keys": ("app.cli.keys_command", "create, list and revoke API keys (the chat API, MCP over HTTP)"),
    "eval": ("evals.cli", "evaluate summarization prompts, extraction and token savings"),
    "local": ("app.local.model_server", "a real model on this machine, offline: prepare, serve, or chat on it"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    at = _module_command_at(argv)
    if at is not None:
        import importlib

        module = importlib.import_module(MODULE_COMMANDS[argv[at]][0])
        rest = argv[at + 1 :]
        if at:  # `memory-agent -v serve`: the global -v, as --help lists it before every command
            if _has_verbose_option(module):
                rest = ["-v", *rest]
            else:
                logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        try:
            return module.main(rest)
        except MemoryAgentError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except BrokenPipeError:
            return _reader_left()
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose:  # pypdf's warnings on a damaged PDF repeat what ingest reports of the file
        logging.getLogger("pypdf").setLevel(logging.ERROR)
    if args.command == "chat":
        from app.cli.chat_logging import log_to_file

        log_to_file(verbose=args.verbose)  # log records go to a file, not into the conversation
    if args.command in ("chat", "import"):
        from llm import server_modes

        server_modes.keep_in(server_modes.default_path())  # a mode a server refused is not sent again in a later run
    if extra:
        _command_parser(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return asyncio.run(_dispatch(args))
    except MemoryAgentError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted (Ctrl-C)", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _reader_left()


GLOBAL_FLAGS = ("-v", "--verbose")


def _module_command_at(argv: list[str]) -> int | None:
    """Where a command of MODULE_COMMANDS stands in ``argv`` (first, or after the global -v), or None."""
    at = 0
    while at < len(argv) and argv[at] in GLOBAL_FLAGS:
        at += 1
    return at if at < len(argv) and argv[at] in MODULE_COMMANDS else None


def _has_verbose_option(module) -> bool:
    """Whether the module's own command takes -v (mcp, eval): then the global -v is passed on as its own."""
    return any("-v" in action.option_strings for action in module.build_parser()._actions)


def _reader_left() -> int:
    """The reader of stdout left (`| head -1`): stop quietly, as other tools do, and keep Python's
    own flush at exit from raising it again. A broken pipe that is not stdout's is re-raised."""
    import select

    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        stdout_broken = any(events & select.POLLERR for _, events in poll.poll(0))  # a pipe whose reader is gone
    except (OSError, ValueError, AttributeError):
        stdout_broken = True
    if not stdout_broken:
        raise
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 1


async def _dispatch(args: argparse.Namespace) -> int:
    from memory.backend import open_memory

    if args.command == "reindex":
        return await _reindex(episodes_only=args.episodes)
    if args.command == "migrate":
        _upgrade_embedded_postgres(args.old_postgres_bin)  # before the backend opens: it could not start the old data
    started = time.perf_counter()
    async with open_memory() as backend:
        logging.getLogger(__name__).info("memory ready in %.2fs", time.perf_counter() - started)
        if args.command == "chat":
            from app.cli.chat_run import run_chat

            return await run_chat(backend, user_id=args.user, chat_id=args.chat_id, new=args.new, model=args.model)
        if args.command == "memory" and args.memory_command == "delete-invalid":
            return await _delete_invalid(backend.store, args.user, args.kind, args.key)
        if args.command == "memory":
            from app.cli.memory_report import memory_snapshot, render_snapshot

            snap = await memory_snapshot(backend.store, args.user, include_superseded=args.all)
            print(json.dumps(snap, ensure_ascii=False, indent=2) if args.json else shown(render_snapshot(snap)))
            return 0
        if args.command == "doctor":
            from app.cli.doctor import doctor_report

            print(await doctor_report(backend, startup_seconds=time.perf_counter() - started))
            return 0
        if args.command == "migrate":
            # open_memory's set-up did the work (one transaction per table); say what it was.
            print("\n".join(f"migrated: {line}" for line in backend.migrated) or "The database is on the current layout already.")
            return 0
        if args.command == "import":
            return await _import(backend, args)
        if args.command == "ingest":
            import knowledge

            if args.remove:
                report = await knowledge.remove_documents(backend.pool, [str(p) for p in args.paths], collection=args.collection)
            else:
                report = await knowledge.ingest(
                    backend.pool, backend.embeddings.embeddings, args.paths, collection=args.collection, follow_symlinks=args.follow_symlinks
                )
            print(report.summary())
            if not report.ok:
                print(f"error: {len(report.failed)} of the files could not be {'removed' if args.remove else 'ingested'} (listed above)", file=sys.stderr)
                return 1
            return 0
    print(f"error: unknown command {args.command!r}", file=sys.stderr)
    return 2


def _upgrade_embedded_postgres(old_bin: Path | None) -> None:
    """Upgrade the embedded Postgres' data folder when an older major wrote it, saying each step."""
    if os.environ.get("DATABASE_URL"):
        if old_bin is not None:
            print("DATABASE_URL is set: the embedded Postgres is not used, --old-postgres-bin is ignored.")
        return
    from storage.embedded_upgrade import upgrade_embedded

    upgrade_embedded(old_bin=old_bin, say=lambda line: print(line, flush=True))


async def _delete_invalid(store, user: str, kind: str, key: str) -> int:
    from memory.writer.edits import delete_invalid
    from memory.queries import ItemIsValid

    try:
        deleted = await delete_invalid(store, user, kind, key)
    except ItemIsValid as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not deleted:
        print(f"error: user {user} has no {kind} item {key!r}", file=sys.stderr)
        return 1
    print(f"Deleted the invalid {kind} item {key!r} of user {user}.")
    return 0


def _split_said(n: int, max_chars: int) -> str:
    """What an import line adds when messages over the message limit were imported in parts."""
    if n == 0:
        return ""
    which = "A message" if n == 1 else f"{n} messages"
    return f" {which} over {max_chars:,} characters (the message limit) came in parts, one after another."


def _copies_skipped(n: int) -> str:
    """What an import line adds when the export held the conversation more than once, the same each time."""
    if n == 0:
        return ""
    return " The export holds it twice, the same both times: the copy was skipped." if n == 1 else (
        f" The export holds it {n + 1} times, the same each time: the copies were skipped.")


def _import_again(args: argparse.Namespace, resume: str | None = None) -> str:
    """The command that imports the same file again as this one did (to paste into a shell: quoted)."""
    from shlex import quote

    # A value opening with a dash would be taken for an option: the file as ./-name, the others as --option=value.
    file = f"./{args.file}" if args.file.startswith("-") and args.file != "-" else args.file
    words = ["memory-agent", "import", file, "--user", args.user]
    for option, value in (("--title", args.title), ("--model", args.model), ("--resume", resume)):
        if value:
            words += [f"{option}={value}"] if value.startswith("-") else [option, value]
    command = " ".join(quote(w) for w in words)
    return f"{command} (with the history on stdin again)" if args.file == "-" else command


async def _import(backend, args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from core.context import Context
    from graph.assembly import compile_graph
    from memory.chat_import import MAX_IMPORT_BYTES, check_all, read_import
    from memory.import_job import import_chat
    from storage.fenced_saver import FencedPostgresSaver

    if args.file == "-" and sys.stdin is None:
        print("error: stdin is closed: pipe the history in, or name its file", file=sys.stderr)
        return 2
    try:
        # One byte past the limit is enough to refuse it (read_import says so), whatever the file's size.
        with (open(sys.stdin.fileno(), "rb", closefd=False) if args.file == "-" else open(args.file, "rb")) as source:
            raw = source.read(MAX_IMPORT_BYTES + 1)
    except OSError as exc:
        print(f"error: cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    # Bounded (size, values, nesting) and checked: InvalidImport (a MemoryAgentError) before anything is written.
    chats = await asyncio.to_thread(read_import, raw, title=args.title)
    del raw
    if args.resume and len(chats) != 1:
        print(f"error: --resume takes a file of one history; {args.file} holds {len(chats)}", file=sys.stderr)
        return 2
    graph = compile_graph(FencedPostgresSaver(backend.pool), backend.store)
    context = Context(user_id=args.user, **({"model": args.model} if args.model else {}))
    check_all(chats, context.max_message_chars)  # every chat of an export, before the first is written
    # The user as of now, as a request's caller is: a forget-me while this runs refuses every write after
    # it (the next conversation of an export too: it began after forget-me, for the forgotten user).
    from storage import owner_forgets

    owner_forgets.set_caller(args.user, await owner_forgets.generation(backend.pool, args.user))
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("messages"), TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, transient=False, disable=not sys.stdout.isatty()) as progress:
        for chat in chats:
            task = progress.add_task(shown(chat.title or "chat"), total=len(chat.messages))
            started: list[tuple[str, bool]] = []  # (the chat, whether the import adds to a complete one)
            try:
                done = await import_chat(
                    graph, backend.pool, args.user, chat, context=context, resume=args.resume,
                    on_progress=lambda n, total, task=task: progress.update(task, completed=n), on_chat=lambda c, grown: started.append((c, grown)),
                )
            except asyncio.CancelledError:  # Ctrl-C: the chat keeps what was imported; say how to go on
                if started:
                    progress.stop()
                    chat_id, grown = started[0]
                    if grown:  # the chat was complete before: whole exchanges, no --resume
                        said = (f"The import was interrupted: chat {chat_id} keeps what it held and the whole new exchanges added so far "
                                f"(the one under way was taken back), and takes messages. Import the export again to add the rest: "
                                f"{_import_again(args)}")
                    else:
                        # An export's conversation is known by its source id: importing the export again goes on with it.
                        if len(chats) == 1:
                            go_on = f"Go on with: {_import_again(args, resume=chat_id)}"
                        elif chat.source_id:
                            go_on = (f"It takes no message until the import goes on or the chat is deleted. Import the export again to "
                                     f"go on (the conversations imported whole are not imported twice): {_import_again(args)}")
                        else:  # (a list of LoCoMo samples: no ids, so the file imported again would import each sample anew)
                            alone = argparse.Namespace(**{**vars(args), "file": "FILE"})
                            go_on = (f"It takes no message until it is resumed or deleted. Importing {args.file} again would import its "
                                     f"histories anew (they have no ids); put history {chats.index(chat) + 1} of it alone in a file and go "
                                     f"on with: {_import_again(alone, resume=chat_id)}")
                        said = f"The import was interrupted: chat {chat_id} keeps the exchanges imported so far, listed as incomplete. {go_on}"
                    print(shown(said), file=sys.stderr)
                raise
            copies = _split_said(chat.split_messages, context.max_message_chars) + _copies_skipped(chat.skipped_copies)
            if done.already_imported:
                progress.update(task, completed=len(chat.messages))
                why = f" {done.not_added_reason}" if done.not_added_reason else ""
                print(shown(f"Already imported: \"{chat.title or 'untitled'}\" is chat {done.chat_id} of user {args.user}; nothing added.{why}{copies}"))
                continue
            if done.held_before:
                print(shown(f"Added {done.messages - done.held_before} new messages ({done.exchanges} exchanges, {done.first_time:%Y-%m-%d} to "
                            f"{done.last_time:%Y-%m-%d}) to chat {done.chat_id} \"{done.title}\" of user {args.user}, which held its first {done.held_before}.{copies}"))
                continue
            print(shown(f"Imported {done.messages} messages ({done.exchanges} exchanges, {done.first_time:%Y-%m-%d} to {done.last_time:%Y-%m-%d}) into chat {done.chat_id} \"{done.title}\" of user {args.user}.{copies}"))
    return 0


async def _reindex(*, episodes_only: bool = False) -> int:
    from embeddings import resolve_embeddings
    from storage.postgres import database_url, open_pool, prepare_database
    from memory.reindex import reindex, reindex_episodes

    url = database_url()
    await prepare_database(url)
    emb = resolve_embeddings()
    pool = await open_pool(url)
    try:
        started = time.perf_counter()
        counts = await (reindex_episodes(pool, emb) if episodes_only else reindex(pool, emb))
    finally:
        await pool.close()
    if episodes_only:
        print(f"Indexed {counts['messages']} messages of every chat with {emb.name} in {time.perf_counter() - started:.1f}s.")
        return 0
    print(
        f"Re-embedded {counts['store_items']} memory items and {counts['knowledge_chunks']} knowledge chunks, and indexed "
        f"{counts['messages']} messages, with {emb.name} ({emb.dims} dims) in {time.perf_counter() - started:.1f}s."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
