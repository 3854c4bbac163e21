"""The transaction coordinator: ``__transaction_state``, transaction metadata and markers."""
