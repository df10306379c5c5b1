"""The model APIs the proxy speaks, one dialect each (base.py: the seam; registry.py: which are available)."""
