"""The transaction coordinator: transaction state, its store, and the markers it sends."""
