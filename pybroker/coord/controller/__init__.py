"""The controller's duties while this broker holds /controller: partition leader elections,
ISR shrinks for dead brokers, reassignments (KIP-455), preferred-leader rebalancing."""
