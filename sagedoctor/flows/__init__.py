"""The flows: each wires the stages (probe, decide, install, verify) for one job and returns
a value (plus typed events where it runs long); commands/ and the TUI only render it."""
