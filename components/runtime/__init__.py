"""Runtime: facts about the process itself, imported by every layer above: which software
stack runs (`stack`, also run by `make` with the system Python, so standard library only),
progress lines for a console (`progress`) and AutoGraph kept out of Keras (`keras_autograph`).
May import `components.contract` only.
"""
