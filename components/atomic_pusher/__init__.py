"""AtomicPusher: a blessed model pushed in TF Serving layout, one complete version at a time
(spec and component in `component.py`, the file moves in `executor.py`)."""
