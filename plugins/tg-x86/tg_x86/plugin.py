"""The tgcore plugin ``x86`` (entry point ``x86 = "tg_x86.plugin"``).

For now it registers nothing: the machine-code layer (encoder, assembler, runtime, CPU
probe) is in place, and the ``X86`` renderer for the CPU device arrives with instruction
selection and register allocation. Its availability probe will be
``tg_x86.cpu.unavailable_reason``. Cheap to import: no submodule loads here.
"""
TG_HOOKSPEC_VERSION = 1
