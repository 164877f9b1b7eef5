"""One module per command; each takes parsed options and returns an exit code."""
