"""The security cases that run the CLI: hostile servers, local files, outputs, credentials, the source cache."""
