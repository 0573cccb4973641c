"""The same questions for PyTorch training scripts, at the aten level.

``trace`` (run a script on the emulator, record every aten op reaching the device) ·
``scan`` (judge a trace against torch profiles) · ``static`` / ``static_ast`` (the migration
checklist read from the source, nothing run).  Torch profiles and their replacements are a
run-time concept and live in :mod:`hal.op_support`.
"""
