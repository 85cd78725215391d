"""User memory: profile, preferences, facts, tasks and chat records in the store; how they are
recalled, written, summarized and searched."""
