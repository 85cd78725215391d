"""One module per graph node: load_context → retrieve → reply → summarize → extract_memories."""
