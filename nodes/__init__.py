"""One module per graph node, in graph/assembly.py's phases: load_context → retrieve → reply ⇄ tools, then
summarize → record_chat → index_messages → extract_memories."""
