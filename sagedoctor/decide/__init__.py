"""Pure decisions: facts (and the wheel index) in, findings and plans out. Nothing here does
I/O: no subprocess, no network, no file writes (tests/test_import_graph.py holds it to that)."""
