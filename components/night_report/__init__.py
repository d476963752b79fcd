"""The night's report: its message, and the exit handler of compiled files."""
