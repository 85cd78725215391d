"""The built-in offline model: rule-based extraction, extractive summaries, replies from memory.
Only llm.chat_model imports it."""
