"""py-spy profiles of a bench workload against pybroker (docs/performance.md)."""
