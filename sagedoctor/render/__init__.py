"""Text and JSON for people and programs: findings, plans and reports; text from outside
(a GPU name, a tool's output) is stripped of control characters before it is shown."""
