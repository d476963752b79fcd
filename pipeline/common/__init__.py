"""Small helpers every command and target shares: exit statuses, atomic file writes, the library
log, what submitting a compiled file means on either cloud target and which target a file was
compiled for. Imports no TFX."""
