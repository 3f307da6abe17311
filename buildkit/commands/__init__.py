"""One module per CLI command: load inputs, call the library, present the result."""
