"""A fuzzer for every request the broker decodes: valid requests built from kio's entities (the
message specs), mutated, then decoded in-process and sent to a running broker."""
