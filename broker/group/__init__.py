"""Group coordination: consumer groups, their members, assignments and committed offsets (sans-IO)."""
