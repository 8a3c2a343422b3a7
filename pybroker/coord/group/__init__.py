"""Group coordination: classic and consumer-protocol (KIP-848) groups, their migration, committed
and transactional offsets, and the coordinator that owns them."""
