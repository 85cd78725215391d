"""The one writer of a user's memory: every write or delete of an item in a user's namespaces goes
through these modules (tests/unit/test_one_home.py fails otherwise), so the graph, the HTTP API,
the CLI, MCP and the LangGraph store API all change memory under the same rules and the same lock.

- ``merge_rules``: what counts as the same memory (merge, supersede) and the thresholds;
- ``extraction``: one extraction result applied exactly once; an abandoned branch retracted;
  MCP's ``remember``; ``last_used`` after a reply;
- ``edits``: the user's and store-API clients' edits and deletes;
- ``forgets``: the store half of a forget (memory.forgetting reaches the derived copies);
- ``records``: chat records, re-embedding, forget-me;
- ``stored``: the reads these make inside their transaction.
"""
