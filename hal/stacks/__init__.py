"""The seams other stacks offer a new device, filled from the selected backend.

Where a stack a user runs has a sanctioned way to add a device, hal fills it rather than patching
the stack: :mod:`hal.stacks.deepspeed` (DeepSpeed's accelerator, installed with
``deepspeed.accelerator.set_accelerator`` before DeepSpeed binds its op builders).  ``hal run``
installs them; a script without ``hal run`` calls their ``install()`` (docs/redirect.md, "LLM
training stacks").
"""
