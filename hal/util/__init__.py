"""Small helpers every part of hal (and op_coverage) shares; nothing here knows about devices.

``io`` (crash-safe writes, JSONL) · ``term`` (terminal output: JSON, colour only on a terminal,
tables, progress bars) · ``exit`` (a clean interpreter exit beside torch's native threads) ·
``moved`` (old import paths kept for one release) · ``own_ops`` (calls hal makes for itself, never
counted as the user's).
"""
