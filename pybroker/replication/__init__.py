"""Replication: partition roles (leader, follower), high watermarks, ISR maintenance, acks=all
waits and the follower fetchers.  See docs/replication.md."""
