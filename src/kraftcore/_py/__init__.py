"""Pure-Python reference kernels: the specification the native kernels in `ext/` must match.

Every module here has a compiled twin in `kraftcore._c` with the same public names and the
same observable behaviour (results, exceptions, messages' meaning)."""
