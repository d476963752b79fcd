"""AtomicPusher: a blessed model pushed in TF Serving layout, one complete version at a time
(spec and component in `component.py`, the protocol and file moves in `executor.py`, staging
folders and their leases in `staging.py`, the serving folder's push lock in `lock.py`)."""
