"""Real clients against a real pybroker process (see docs/testing.md)."""
