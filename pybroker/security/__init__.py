"""Authentication (SASL PLAIN and SCRAM, TLS client certificates) and the principal a
connection acts as; sans-I/O where it can be (the connection drives it)."""
