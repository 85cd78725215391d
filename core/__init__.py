"""The shared base: the graph's state and context, messages, tokens, schemas, errors,
namespaces, text validation and metrics. Imports nothing of ours."""
