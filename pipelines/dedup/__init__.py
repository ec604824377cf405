"""The dedup stage: pairs/ -> dedup/ (groups, kept/removed ids, report)."""
