"""Small helpers every command and target shares: exit statuses, atomic file writes, the library
log, and what submitting a compiled file means on either cloud target. Imports no TFX."""
