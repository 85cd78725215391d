"""The agent's read tools are the MCP tools of the same names (memory.queries): one grammar, one floor."""

from memory import chat_search, queries
from nodes.tools import search_conversation_history


def test_the_agent_tool_accepts_every_time_range_the_mcp_tool_understands():
    for spec in ("all", "today", "yesterday", "24h", "7d", "2w", "3m", "2026-01-05", "2026-01-01..2026-01-31"):
        queries.parse_time_range(spec)  # the MCP grammar
        args = search_conversation_history.tool_call_schema.model_validate({"query": "bank", "time_range": spec})
        assert args.time_range == spec


def test_summary_hits_use_the_same_similarity_floor_as_finding_a_chat():
    assert queries.MIN_SUMMARY_SIMILARITY == chat_search.MIN_SIMILARITY
