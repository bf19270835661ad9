"""tgcore: a small tensor compiler with pip-installable backends."""
