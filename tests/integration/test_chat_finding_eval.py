"""`memory-agent eval chats` end to end on the embedded Postgres, on the first chats of the shipped set."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from evals.chat_finding_eval import ChatFindingOptions, run_chat_finding
from evals.cli import build_parser


@pytest.mark.slow  # replays the whole chat-finding eval through the graph
async def test_the_eval_replays_chats_through_the_graph_and_scores_each_request(new_database, tmp_path):
    console = Console(record=True, width=160)
    results = await run_chat_finding(ChatFindingOptions(limit=4, out=tmp_path, database_url=new_database("chateval")), console)

    assert results.chats == 4 and len(results.requests) == 4
    assert results.titles["bank"] == "My bank charged me twice"  # the offline keyword title, from the real summarize node
    assert results.top1 == 1.0 and results.wrong_single == 0.0
    request = next(r for r in results.requests if r.expected == "bank")
    assert request.searched == "the bank" and request.outcome == "one"
    assert json.loads((tmp_path / "results.json").read_text())["command"] == "chats"
    assert "top-1: the chat meant ranks first" in console.export_text()


def test_the_eval_commands_are_on_the_cli():
    parser = build_parser()
    assert parser.parse_args(["chats", "--limit", "3"]).limit == 3
    assert parser.parse_args(["retrieval", "--calibrate"]).calibrate
