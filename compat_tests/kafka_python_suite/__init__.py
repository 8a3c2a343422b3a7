"""Our stand-in harness for kafka-python's own integration suite (see docs/testing.md).

kafka-python's files are never committed here: scripts/install-test-deps unpacks its sdist
under .cache/, and scripts/run-kafka-python-suite assembles a runnable copy with these files.
"""
