"""Authentication of client connections: SASL mechanisms and the per-connection exchange."""
