"""The summaries eval's reader answers under an output cap, as a local server sees it in the request."""

from __future__ import annotations

import uuid

from evals.summary_reader import READER_MAX_TOKENS, answer_all
from llm.chat_model import load_chat_model
from tests.support.openai_stub_server import openai_stub, openai_stub_server  # noqa: F401 (pytest fixtures)


async def test_reader_calls_carry_the_output_cap_that_llama_cpp_reads(openai_stub):
    openai_stub.responder = lambda request: "Haifa"
    model = load_chat_model(f"openai:stub-{uuid.uuid4().hex[:8]}")

    answers = await answer_all(model, "Dana lives in Haifa.", ["Where does Dana live?", "What is Dana's job?"])

    assert answers == ["Haifa", "Haifa"]
    assert len(openai_stub.requests) == 2
    # llama-cpp-python's server reads only the classic max_tokens; OpenAI reads max_completion_tokens.
    assert {(r.body.get("max_tokens"), r.body.get("max_completion_tokens")) for r in openai_stub.requests} == {
        (READER_MAX_TOKENS, READER_MAX_TOKENS)
    }
