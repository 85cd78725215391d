"""The offline model's extraction rules, by topic (offline_model/rule_extraction.py runs them)."""
